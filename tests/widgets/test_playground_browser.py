"""The env playground in a browser (voila, headless Chromium): the masked Cutting-2D env stepped by hand with its
buttons (masked ones greyed), then a trained run's policy acts; the screenshot goes to test-artifacts/playground.png
and to docs/playground.png (the guide's picture)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from run_utils import TINY

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cutting_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trained run directory of the masked Cutting-2D env (PPO, a few short epochs), as a user has one."""
    from maze_lab.run.run_context import RunContext

    rc = RunContext(experiment="cutting2d_masked_ppo",
                    overrides={**TINY, "n_epochs": 4, "algorithm.n_rollout_steps": 64,
                               "log_base_dir": str(tmp_path_factory.mktemp("cut"))}, silent=True)
    rc.train()
    rc.close()
    return rc.run_dir


def _count(page: object) -> str:
    return page.locator(".maze-lab-pg-count").inner_text().strip()


def test_the_playground_steps_cutting2d_by_hand_then_the_policy_acts(cutting_run: Path, tmp_path: Path) -> None:
    import browser_utils as bu

    reason = bu.browser_skip_reason()
    if reason:
        pytest.skip(reason)
    notebook = bu.write_notebook(tmp_path / "playground.ipynb", [
        "from maze_lab.examples.cutting2d import SIMPLE_PROBLEM, make_masked_env\n"
        "from maze_lab.widgets import EnvPlayground\n\n"
        f"pg = EnvPlayground(make_masked_env(**SIMPLE_PROBLEM), policy={str(cutting_run)!r}, seed=0,\n"
        "                   action_masks={'cut_rotation': 'cutting_mask'})\n"
        "pg",
    ])
    server = bu.start_voila(notebook, tmp_path)
    try:
        server.wait_ready()
        with bu.chromium_page(1400, 1300) as page:
            page.goto(server.url, timeout=120_000)
            page.wait_for_selector(".maze-lab-playground .maze-lab-pg-head-piece_idx", timeout=120_000)
            pieces = page.locator(".maze-lab-pg-head-piece_idx")
            assert pieces.count() == 50
            # one piece in stock at the start: only its slot can be chosen, the other 49 are greyed
            assert page.locator(".maze-lab-pg-head-piece_idx:disabled").count() == 49
            assert page.locator(".maze-lab-pg-head-piece_idx.maze-lab-pg-masked").count() == 49
            assert "env step 0" in _count(page)

            # ---- three steps by hand: a piece (a click is the sub-step), then rotation and order, then "step"
            for n in range(1, 4):
                page.locator(".maze-lab-pg-head-piece_idx:not(:disabled)").first.click()
                page.wait_for_selector(".maze-lab-pg-key-1 .maze-lab-pg-step", timeout=60_000)
                rotation = page.locator(".maze-lab-pg-head-cut_rotation:not(:disabled)").first
                rotation.click()
                page.locator(".maze-lab-pg-head-cut_order.maze-lab-pg-value-1").click()
                page.locator(".maze-lab-pg-step").click()
                bu.wait_until(lambda n=n: f"env step {n} ·" in _count(page), timeout=60,
                              what=f"env step {n} after the hand-made step")
            assert page.locator(".maze-lab-pg-error").is_hidden()
            events = page.locator(".maze-lab-pg-events").inner_text()
            assert "CuttingEvents.valid_cut" in events
            assert "raw_piece_usage_per_step" in page.locator(".maze-lab-pg-step-info").inner_text()
            bars = page.locator(".maze-lab-pg-bars[data-head='piece_idx'] rect[data-p]")
            assert bars.count() == 50

            # ---- the policy acts: 8 actions (4 env steps), each shown as it is taken
            page.fill(".maze-lab-pg-act-n input", "8")
            page.press(".maze-lab-pg-act-n input", "Enter")
            page.click(".maze-lab-pg-act-many")
            bu.wait_until(lambda: "env step 7 · 14 actions" in _count(page)
                          and page.locator(".maze-lab-pg-act-many").inner_text().strip() == "steps",
                          timeout=180, what="the policy's 8 actions")
            assert page.locator(".maze-lab-pg-error").is_hidden()
            assert page.locator(".maze-lab-pg-act").is_enabled()  # the policy can go on acting
            history = page.locator(".maze-lab-pg-history option").all_inner_texts()
            assert len(history) == 15 and history[-1].endswith("policy") and history[6].endswith("you")
            assert page.evaluate("() => { const img = document.querySelector('.maze-lab-pg-picture');"
                                 " return img.complete && img.naturalWidth > 400; }")
            probabilities = [float(p) for p in bars.evaluate_all("(els) => els.map((e) => e.dataset.p)")]
            assert abs(sum(probabilities) - 1.0) < 1e-4
            page.evaluate("() => window.scrollTo(0, 0)")
            shot = bu.screenshot(page, "playground", locator=page.locator(".maze-lab-playground"))
            docs = bu.REPO / "docs"
            docs.mkdir(exist_ok=True)
            shutil.copyfile(shot, docs / "playground.png")
    finally:
        server.stop()
