"""The shareable report (``write_report``, ``maze-lab report``): one HTML file whose figures hold the run's own
numbers, with plotly.js once, the configuration escaped, the model drawings stripped of anything that runs, a
replayable episode, bounded in size; bad input is one line with exit code 2."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml
from run_utils import TINY, copy_run, lengthen_run, run_maze_lab, run_with_an_episode

from maze_lab.cli import main
from maze_lab.core.log_stats.stats_files import write_stats_file
from maze_lab.core.log_stats.writers import StatsStore
from maze_lab.run.run_dir import RunDirectory
from maze_lab.widgets.dashboard import TrainingDashboard
from maze_lab.widgets.report import MAX_POINTS, plotly_array, safe_svg, thin_indices, write_report

SIZE_BOUND = 10 * 1024**2
"""What a report of a 1,000-epoch run stays under (tests/benchmarks/report_size.py measures it too)."""

_FIGURE = re.compile(r"<script type='application/json' class='maze-lab-figure' data-target='[^']*' "
                     r"data-kind='([^']*)' data-key='([^']*)'>(.*?)</script>", re.S)
_STEPS = re.compile(r"<script type='application/json' class='maze-lab-episode-steps'>(.*?)</script>", re.S)


# ---- runs ----------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A finished three-epoch CartPole run with one recorded episode (frames included), and a copy of it whose
    configuration says another learning rate (what the comparison must tell apart)."""
    base = tmp_path_factory.mktemp("report-runs")
    run_dir = run_with_an_episode(base)
    other = copy_run(run_dir, base / "default" / "other-lr")
    config = yaml.safe_load((other / "config.yaml").read_text())
    config["algorithm"]["lr"] = 0.000123
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    shutil.rmtree(other / "trajectories")
    return {"run": run_dir, "other": other, "base": base}


# ---- reading a report back ---------------------------------------------------------------------------------------
def figures(text: str) -> list[tuple[str, str, dict]]:
    """``(kind, key, figure)`` of every figure of a report, in order."""
    return [(kind, html.unescape(key), json.loads(body)) for kind, key, body in _FIGURE.findall(text)]


def report_curves(text: str, charts: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What the report's curve figures draw, as ``TrainingDashboard.curve_data`` gives it: ``prefix/topic/event/name
    -> (epochs, values)``."""
    out = {}
    for kind, key, fig in figures(text):
        if kind != "curve":
            continue
        chart = charts[key]
        names = chart.names()
        for trace in fig["data"]:
            prefix, role = trace["meta"]["prefix"], trace["meta"]["role"]
            base = f"{prefix}/{chart.topic}/{chart.event}/"
            x = plotly_array(trace["customdata"])
            y = plotly_array(trace["y"]).astype(np.float64)
            if role == "band":
                n = len(x) // 2
                out[base + names[2]], out[base + names[1]] = (x[:n], y[:n]), (x[:n], y[n:][::-1])
            elif role != "smooth":
                out[base + names[0]] = (x, y)
    return out


def assert_curves_are_the_statistics(text: str, run_dir: Path) -> dict:
    """Every curve of the report equals its statistic in the run's StatsStore; returns the curves."""
    dash = TrainingDashboard(run_dir, tabs=())
    charts, shown = dash.charts, dash.shown
    dash.close()
    curves = report_curves(text, charts)
    assert [key for kind, key, _ in figures(text) if kind == "curve"] == shown  # one figure per chart shown
    df = StatsStore.load(run_dir).to_dataframe()
    checked = 0
    for (prefix, topic, event, name), part in df.groupby(["prefix", "topic", "event", "name"]):
        label = f"{prefix}/{topic}/{event}/{name}"
        if label in curves:
            part = part.sort_values("epoch")
            epochs, values = curves[label]
            assert list(epochs) == part.epoch.tolist(), label
            np.testing.assert_allclose(values, part.value.to_numpy(), err_msg=label)
            checked += 1
    assert checked == len(curves) > 5
    return curves


# ---- the report ----------------------------------------------------------------------------------------------------
def test_the_report_of_a_run_holds_its_numbers_once_each(runs, tmp_path: Path):
    from plotly.offline import get_plotlyjs

    run_dir = runs["run"]
    path = write_report(run_dir, tmp_path / "report.html")
    text = path.read_text(encoding="utf-8")
    assert path.stat().st_size < SIZE_BOUND
    assert text.count(get_plotlyjs()[:400]) == 1 and text.count("* plotly.js v") == 1  # embedded once
    own = text.replace(get_plotlyjs(), "")  # plotly.js itself names its web site
    assert "<script src" not in own and not re.search(r"(src|href)=['\"]?(https?:)?//", own)  # nothing to fetch
    assert_curves_are_the_statistics(text, run_dir)

    # distributions of the last epoch: the action counts are the store's
    store = StatsStore.load(run_dir)
    last = max(r[0] for r in store.rows_since(0)[0])
    actions = [fig for kind, _, fig in figures(text) if kind == "actions"]
    assert len(actions) == 1 and f"epoch {last}" in actions[0]["layout"]["title"]["text"]
    sample = next(s for s in store.samples(topic="DiscreteActionEvents", epoch=last) if s[1] == "train")
    counts = dict(zip(actions[0]["data"][0]["x"], actions[0]["data"][0]["y"], strict=True))
    assert counts == {str(v): int(np.sum(sample[5] == v)) for v in (0, 1)}
    assert any(kind == "observations" for kind, _, _ in figures(text))

    # the model: both drawings inline, their blocks named
    assert text.count("<figure class='maze-lab-graph'") == 2
    assert "data-graph='policy_0'" in text and "data-graph='critic_0'" in text and "DenseBlock" in text

    # the configuration: every value, in a table with its search box
    config = RunDirectory(run_dir).read_config()
    assert "<td>algorithm.lr</td>" in text and f"<td>{config['algorithm']['lr']}</td>" in text
    assert "<td>env.name</td><td>CartPole-v1</td>" in text and "maze-lab-config-search" in text

    # the episode: every step (it is short), each with the recorded frame
    from maze_lab.core.trajectory.files import list_episodes, load_episode

    episode = load_episode(list_episodes(run_dir / "trajectories")[-1])
    steps = json.loads(_STEPS.search(text).group(1))
    assert [s["step"] for s in steps] == list(range(episode.n_steps))
    first = steps[0]["picture"]
    assert first.startswith("data:image/png;base64,")
    assert base64.b64decode(first.split(",", 1)[1]) == episode.frames.png(0)
    np.testing.assert_allclose([s["return"] for s in steps], episode.cumulative_rewards)
    assert any(kind == "episode-strip" for kind, _, _ in figures(text))


def _header(text: str) -> str:
    """The status line of the report's run (the cockpit's status and progress, the reason and error after it)."""
    start = text.index("<div class='maze-lab-run-header'>")
    return text[start:text.index("<nav>", start)]


def test_the_report_of_a_live_run_shows_it_as_it_is(tmp_path: Path):
    """A run that is training (paused between two updates, so that its files hold still): the report says so, and its
    curves are the statistics of the epochs written so far; the playground acts with that run's policy meanwhile."""
    from maze_lab import GymMazeEnv
    from maze_lab.run.attach import attach
    from maze_lab.run.run_context import RunContext
    from maze_lab.widgets.playground import EnvPlayground

    rc = RunContext(overrides={**TINY, "n_epochs": 500, "log_base_dir": str(tmp_path)}, silent=True)
    handle = rc.train_async()
    try:
        def epochs() -> int:
            return int(handle.progress.get("epoch") or 0)

        deadline = time.monotonic() + 600
        while epochs() < 3:  # a few epochs written (the run goes on: 500 epochs)
            assert handle.running and time.monotonic() < deadline, handle.status
            time.sleep(0.1)
        attach(rc.run_dir).pause(timeout=300)  # returns once the run holds between two updates
        text = write_report(rc.run_dir, tmp_path / "live.html").read_text(encoding="utf-8")
        assert "paused" in _header(text), _header(text)
        curves = assert_curves_are_the_statistics(text, rc.run_dir)
        assert max(len(epochs_) for epochs_, _ in curves.values()) >= 3
        pg = EnvPlayground(GymMazeEnv("CartPole-v1"), policy=rc.run_dir, seed=0)
        try:
            assert pg.act(5) == 5 and pg.env_steps == 5
            probs = pg.probabilities["action"]["probs"]
            assert probs.shape == (2,) and abs(float(probs.sum()) - 1.0) < 1e-5
        finally:
            pg.close()
        assert handle.running  # the report and the playground left the run as it was
    finally:
        handle.stop(timeout=300)
        rc.close()


class _BreaksAfter(gym.Wrapper):
    """CartPole whose simulator breaks at its ``n``-th step."""

    def __init__(self, env: gym.Env, n: int):
        super().__init__(env)
        self.n, self.count = n, 0

    def step(self, action):
        self.count += 1
        if self.count >= self.n:
            raise RuntimeError(f"the simulator broke at step {self.count}")
        return self.env.step(action)


def _breaking_cartpole():
    from maze_lab import GymMazeEnv

    return GymMazeEnv(_BreaksAfter(gym.make("CartPole-v1"), 100))


def test_the_report_of_a_failed_run_says_why_and_holds_its_epochs(tmp_path: Path):
    from maze_lab.run.run_context import RunContext

    rc = RunContext(env=_breaking_cartpole, overrides={**TINY, "n_epochs": 50, "log_base_dir": str(tmp_path)},
                    silent=True)
    try:
        with pytest.raises(Exception, match="the simulator broke"):
            rc.train()
    finally:
        rc.close()
    assert RunDirectory(rc.run_dir).read_summary()["status"] == "failed"
    text = write_report(rc.run_dir, tmp_path / "failed.html").read_text(encoding="utf-8")
    header = _header(text)
    assert "failed" in header and "the simulator broke at step 100" in header, header
    curves = assert_curves_are_the_statistics(text, rc.run_dir)  # the epochs before the failure, as written
    assert max(len(epochs_) for epochs_, _ in curves.values()) >= 2


def test_a_long_episode_keeps_every_kth_step_and_says_so(runs, tmp_path: Path):
    text = write_report(runs["run"], tmp_path / "report.html", max_frames=5).read_text(encoding="utf-8")
    steps = json.loads(_STEPS.search(text).group(1))
    assert 1 < len(steps) <= 5 and steps[0]["step"] == 0
    every = steps[1]["step"]
    assert [s["step"] for s in steps] == list(range(0, steps[-1]["step"] + 1, every))
    assert f"every {every}th" in text and "at most 5 steps of an episode" in text


def test_several_runs_are_compared_and_named_by_what_differs(runs, tmp_path: Path):
    path = write_report([runs["run"], runs["other"]], tmp_path / "report.html")
    text = path.read_text(encoding="utf-8")
    assert "id='comparison'" in text and text.count("<section class='maze-lab-run'") == 2
    compared = [fig for kind, _, fig in figures(text) if kind == "comparison"]
    assert compared, "no comparison figures"
    names = {trace["name"] for fig in compared for trace in fig["data"]}
    assert "lr=0.000123" in names and len(names) == 2, names
    assert "<th>algorithm.lr</th>" in text  # the table of metrics with the hyperparameter that differs
    assert "no recorded episodes in this run" in text  # the copy has none; the report says so


def test_text_from_the_run_is_escaped_and_its_drawings_run_nothing(runs, tmp_path: Path):
    evil = copy_run(runs["run"], tmp_path / "evil" / "run")
    config = yaml.safe_load((evil / "config.yaml").read_text())
    config["notes"] = "<script>alert('config')</script>"
    (evil / "config.yaml").write_text(yaml.safe_dump(config))
    store = StatsStore.load(evil)
    rows, _ = store.rows_since(0)
    by_epoch = {}
    for row in rows:
        by_epoch.setdefault(row[0], ([], []))[0].append(row)
    for sample in store.samples():
        by_epoch[sample[0]][1].append(sample)
    for epoch, (epoch_rows, _) in by_epoch.items():  # a statistic of a custom topic, shown first (a loss)
        epoch_rows.append((epoch, "train", "<b>EvilEvents</b>", "loss<img src=x onerror=alert(1)>", "", 1.0))
    write_stats_file(evil, [by_epoch[e] for e in sorted(by_epoch)])
    (evil / "model_graphs" / "evil.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="50" height="50" '
        'onload="alert(1)"><script>alert(2)</script><defs><marker id="m"><path d="M0,0 L1,1"/></marker></defs>'
        '<rect width="10" height="10" onclick="alert(3)" fill="url(http://evil.example/x)" style="fill:red"/>'
        '<a xlink:href="javascript:alert(4)"><text x="1" y="9">click</text></a>'
        '<foreignObject><div xmlns="http://www.w3.org/1999/xhtml">html</div></foreignObject>'
        '<image href="http://evil.example/p.png"/><path d="M0,0 L9,9" marker-end="url(#m)"/></svg>')

    text = write_report(evil, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<script>alert" not in text and "<img src=x" not in text
    assert "<td>notes</td><td>&lt;script&gt;alert(&#x27;config&#x27;)&lt;/script&gt;</td>" in text
    assert "<h4>&lt;b&gt;EvilEvents&lt;/b&gt;</h4>" in text
    custom = [fig for kind, key, fig in figures(text) if kind == "curve" and "EvilEvents" in key]
    assert len(custom) == 1  # shown, its title escaped for plotly (which reads tags in titles)
    assert custom[0]["layout"]["title"]["text"] == "loss&lt;img src=x onerror=alert(1)&gt;"
    svg = text.split("data-graph='evil'>", 1)[1].split("</figure>", 1)[0]
    for gone in ("script", "onload", "onclick", "javascript", "evil.example", "foreignObject", "<image", "<a ",
                 "fill:red", "xlink"):
        assert gone not in svg, (gone, svg)
    # what is left is the drawing: its path, and its marker under an id of its own (policy_0, critic_0, evil)
    assert 'marker-end="url(#run0-g2-m)"' in svg and 'id="run0-g2-m"' in svg and "<rect" in svg


def test_safe_svg_keeps_the_drawing_and_prefixes_its_ids():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10" viewBox="0 0 20 10"><defs>'
           '<marker id="arrow0"><path d="M0,0 L10,5 z" fill="#6b7280"/></marker></defs>'
           '<g><title>a &lt;b&gt; block</title><rect x="1" y="1" width="5" height="5" rx="2"/>'
           '<text x="2" y="3" font-size="10.5">x &amp; y</text></g>'
           '<path d="M1,1 L5,5" marker-end="url(#arrow0)"/></svg>')
    out = safe_svg(svg, "p1")
    assert out.startswith('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10" viewBox="0 0 20 10"')
    assert '<marker id="p1-arrow0">' in out and 'marker-end="url(#p1-arrow0)"' in out
    assert "<title>a &lt;b&gt; block</title>" in out and ">x &amp; y</text>" in out
    with pytest.raises(ValueError):
        safe_svg("<html><body>not a drawing</body></html>", "p")
    with pytest.raises(ValueError):  # defusedxml refuses a DTD (its entities could expand)
        safe_svg('<!DOCTYPE svg [<!ENTITY a "aaaa">]><svg xmlns="http://www.w3.org/2000/svg">&a;</svg>', "p")


def test_thinning_keeps_the_ends_and_each_stretchs_extremes():
    rng = np.random.default_rng(1)
    y = rng.normal(size=10_000)
    y[1234], y[8765] = 50.0, -50.0
    y[4000:4010] = np.nan
    idx = thin_indices(y, 2000)
    assert len(idx) <= 2000 and idx[0] == 0 and idx[-1] == len(y) - 1 and np.all(np.diff(idx) > 0)
    assert {1234, 8765} <= set(idx.tolist())
    assert np.nanmax(y[idx]) == 50.0 and np.nanmin(y[idx]) == -50.0
    assert list(thin_indices(y[:100], 2000)) == list(range(100))


def test_a_1000_epoch_run_stays_small_and_long_curves_are_thinned(runs, tmp_path: Path):
    long = lengthen_run(runs["run"], tmp_path / "long" / "run", 1000)
    path = write_report(long, tmp_path / "report.html")
    assert path.stat().st_size < SIZE_BOUND, f"{path.stat().st_size / 1024**2:.1f} MB"
    text = path.read_text(encoding="utf-8")
    curves = assert_curves_are_the_statistics(text, long)  # 1,000 points: below the bound, drawn whole
    assert all(len(epochs) == 1000 for epochs, _ in curves.values())
    assert "are thinned" not in text

    thin = write_report(long, tmp_path / "thin.html", max_points=300).read_text(encoding="utf-8")
    assert "Curves of more than 300 points are thinned" in thin
    df = StatsStore.load(long).to_dataframe()
    dash = TrainingDashboard(long, tabs=())
    thinned = report_curves(thin, dash.charts)
    dash.close()
    for label, (epochs, values) in thinned.items():
        prefix, topic, event, name = label.split("/", 3)
        part = df[(df.prefix == prefix) & (df.topic == topic) & (df.event == event) & (df.name == name)]
        part = part.sort_values("epoch")
        assert len(epochs) <= 300 and epochs[0] == 1 and epochs[-1] == 1000, label
        assert values.max() == part.value.max() and values.min() == part.value.min(), label
        np.testing.assert_allclose(values, part.set_index("epoch").value.loc[epochs].to_numpy(), err_msg=label)
    assert MAX_POINTS == 2000


# ---- the command ---------------------------------------------------------------------------------------------------
def test_the_command_writes_the_report_of_several_runs(runs, tmp_path: Path):
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    result = run_maze_lab("report", str(runs["run"]), str(runs["other"]), "-o", str(out), "--max-frames", "7",
                          cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"maze-lab report: {out} (") and "2 runs compared" in lines[0]
    text = out.read_text(encoding="utf-8")
    assert "id='comparison'" in text and len(json.loads(_STEPS.search(text).group(1))) <= 7


@pytest.mark.parametrize("case", ["missing", "not a run", "no folder", "a directory"])
def test_bad_input_is_one_line_with_exit_code_2(runs, tmp_path: Path, capsys, monkeypatch, case: str):
    monkeypatch.chdir(tmp_path)  # where the default report.html would go
    run = str(runs["run"])
    args = {"missing": [str(tmp_path / "nowhere")], "not a run": [str(tmp_path)],
            "no folder": [run, "-o", str(tmp_path / "no" / "report.html")],
            "a directory": [run, "-o", str(tmp_path)]}[case]
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("maze-lab report: error: "), err
    expected = {"missing": "does not exist", "not a run": "is not a maze-lab run directory",
                "no folder": "does not exist", "a directory": "it is a directory"}[case]
    assert expected in err[0]
    assert not (tmp_path / "report.html").exists()


def test_debug_shows_the_traceback(tmp_path: Path, capsys):
    assert main(["report", str(tmp_path), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("maze-lab report: error: ")
