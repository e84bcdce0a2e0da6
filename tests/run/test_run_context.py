"""RunContext and configuration: checked overrides, grids, repeated composition, run directories and the runs API."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conf_options import listed_options

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.config import compose_config
from maze_lab.run.run_context import RunContext
from maze_lab.run.run_dir import NotARunDirectoryError, RunDirectory
from maze_lab.run.runs import compare_runs, list_runs, load_run

TINY = {"algorithm.epoch_length": 2, "algorithm.n_rollout_steps": 16, "runner.concurrency": 2,
        "algorithm.eval_repeats": 1}


def tiny(tmp_path: Path, **more) -> dict:
    return {**TINY, "log_base_dir": str(tmp_path / "outputs"), **more}


# ---- configuration errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"algorithm": "rainbow"},
     f"unknown option 'rainbow' for config group 'algorithm'; valid options: {listed_options('algorithm')}"),
    ({"runner": "cluster"}, f"unknown option 'cluster' for config group 'runner'; valid options: "
                            f"{listed_options('runner')}"),
    ({"experiment": "nope"}, "unknown option 'nope' for config group 'experiment'; valid options: cartpole_ppo, "
                             "cutting2d_masked_ppo"),
    ({"overrides": {"env": "atari"}}, "unknown option 'atari' for config group 'env'; valid options: "),
    ({"overrides": {"algorithm.learning_rate": 0.1}}, "unknown config key 'algorithm.learning_rate'; valid keys in "
                                                      "'algorithm': _target_, batch_size"),
    ({"overrides": {"nepochs": 3}}, "unknown config key 'nepochs'; valid keys in the root config: algorithm, env"),
    ({"overrides": {"runner.workers.count": 3}}, "unknown config key 'runner.workers.count': 'workers' is not in "
                                                 "runner; valid keys there: "),
])
def test_unknown_groups_options_and_keys_list_the_valid_ones(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        RunContext(silent=True, **kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize("key, value, expected", [
    ("algorithm.lr", "fast", "override 'algorithm.lr': expected a value of type float (like 0.00025), got str"),
    ("runner.concurrency", 2.5, "override 'runner.concurrency': expected a value of type int (like 2), got float 2.5"),
    ("algorithm.deterministic_eval", 1, "expected a value of type bool (like False), got int 1"),
    ("seed", "abc", "override 'seed': expected a value of type int (like 1234), got str 'abc'"),
    ("env.name", 3, "override 'env.name': expected a value of type str (like 'CartPole-v1'), got int 3"),
])
def test_wrong_type_names_the_key_and_the_type(key: str, value, expected: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        RunContext(overrides={key: value}, silent=True)
    assert expected in str(info.value)


def test_lossless_conversions_and_schedules_are_accepted() -> None:
    cfg = RunContext(overrides={"algorithm.lr": 1, "runner.concurrency": 4.0,
                                "algorithm.clip_range": {"type": "linear", "start": 0.2, "end": 0.0}},
                     silent=True).config
    assert cfg.algorithm.lr == 1.0 and isinstance(cfg.algorithm.lr, float)
    assert cfg.runner.concurrency == 4 and isinstance(cfg.runner.concurrency, int)
    assert cfg.algorithm.clip_range.type == "linear"


# ---- composition -----------------------------------------------------------------------------------------------
def test_repeated_composition_in_one_process_does_not_leak() -> None:
    for i in range(5):
        a2c = RunContext(algorithm="a2c", overrides={"algorithm.lr": 0.001 * (i + 1), "env.name": "Acrobot-v1"},
                         silent=True).config
        plain = RunContext(silent=True).config
        assert a2c.algorithm._target_.endswith("A2CAlgorithmConfig") and a2c.algorithm.lr == 0.001 * (i + 1)
        assert plain.algorithm._target_.endswith("PPOAlgorithmConfig") and plain.algorithm.lr == 0.00025
        assert plain.env.name == "CartPole-v1"
    exp = RunContext(experiment="cartpole_ppo", silent=True).config
    assert exp.experiment_name == "cartpole_ppo" and exp.runner.concurrency == 8
    assert RunContext(silent=True).config.runner.concurrency == 2


def test_composition_from_threads() -> None:
    results: dict[int, float] = {}
    errors: list[BaseException] = []

    def compose(i: int) -> None:
        try:
            results[i] = compose_config(overrides={"algorithm.lr": i / 1000}).algorithm.lr
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=compose, args=(i,)) for i in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {i: i / 1000 for i in range(1, 7)}


def test_user_config_module_is_searched_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "my_lab_conf"
    (pkg / "algorithm").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "algorithm" / "fast_ppo.yaml").write_text(
        "defaults:\n  - ppo\n  - _self_\nlr: 0.003\nepoch_length: 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        cfg = RunContext(algorithm="fast_ppo", config_module="my_lab_conf", silent=True).config
        assert cfg.algorithm.lr == 0.003 and cfg.algorithm.epoch_length == 3
        assert cfg.algorithm._target_.endswith("PPOAlgorithmConfig")
        with_fast = ", ".join(sorted([*listed_options("algorithm").split(", "), "fast_ppo"]))
        with pytest.raises(ConfigurationError, match=f"valid options: {with_fast}"):
            RunContext(algorithm="fastppo", config_module="my_lab_conf", silent=True)
    finally:
        sys.modules.pop("my_lab_conf", None)
    with pytest.raises(ConfigurationError, match="config module 'no_such_conf' cannot be imported"):
        RunContext(config_module="no_such_conf", silent=True)


# ---- run directories -------------------------------------------------------------------------------------------
def test_a_directory_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "data.csv").write_text("a,b\n")
    with pytest.raises(NotARunDirectoryError, match=r"plain is not a maze-lab run directory: it has no "
                                                    r"maze_lab_run.json \(found: \['data.csv'\]\)"):
        RunContext(overrides=tiny(tmp_path, input_dir=str(plain)), silent=True)
    assert not (tmp_path / "outputs").exists()  # refused before a run directory was made
    with pytest.raises(NotARunDirectoryError, match="is not a directory"):
        load_run(tmp_path / "missing")
    with pytest.raises(NotARunDirectoryError, match="no maze_lab_run.json"):
        load_run(plain)
    with pytest.raises(NotARunDirectoryError):
        compare_runs([plain])


def test_train_evaluate_act_and_load_back(tmp_path: Path) -> None:
    rc = RunContext(overrides=tiny(tmp_path, n_epochs=2, seed=5), silent=True)
    assert rc.train() is rc
    run_dir = rc.run_dir
    assert run_dir.parent == tmp_path / "outputs" / "default"
    stats = rc.evaluate(n_episodes=2)
    assert stats["BaseEnvEvents/reward/episode_count"] == 2
    obs = {"observation": np.zeros(4, dtype=np.float32)}
    action = rc.compute_action(obs, deterministic=True)
    assert set(action) == {"action"}
    rc.close()

    run = load_run(run_dir)
    summary = run.summary
    assert summary["status"] == "done" and summary["epoch"] == 2 and summary["seed"] == 5
    assert {"python", "torch", "maze_lab"} <= set(summary["versions"])
    assert run.config.seed == 5
    assert run.stats.to_dataframe().epoch.max() == 2
    policy = run.policy("best")
    assert policy.compute_action(obs, deterministic=True).keys() == action.keys()
    with pytest.raises(ValueError, match="which='first' is not a checkpoint; valid: 'best', 'last'"):
        run.policy("first")

    df = list_runs(tmp_path / "outputs")
    assert len(df) == 1 and df.run_dir[0] == str(run_dir) and df.status[0] == "done"
    assert df.algorithm[0] == "PPOAlgorithmConfig" and df.env[0] == "CartPole-v1"


def test_grid_of_three_learning_rates(tmp_path: Path) -> None:
    rc = RunContext(algorithm="a2c", overrides=tiny(tmp_path, n_epochs=1, **{"algorithm.lr": [0.001, 0.0005, 0.0002]}),
                    multirun=True, silent=True)
    assert len(rc.configs) == 3 and rc.grid_keys == ["algorithm.lr"]
    table = rc.train()
    assert len(table) == 3
    assert list(table["algorithm.lr"]) == [0.001, 0.0005, 0.0002]
    assert set(table.status) == {"done"} and set(table.epoch) == {1}
    run_dirs = {Path(p) for p in table.run_dir}
    assert len(run_dirs) == 3 and all(RunDirectory.open(p) for p in run_dirs)
    assert len(list_runs(tmp_path / "outputs")) == 3
    with pytest.raises(ConfigurationError, match="multirun=True"):
        rc.train_async()


def test_grid_over_config_groups_shows_the_option_names(tmp_path: Path) -> None:
    rc = RunContext(overrides=tiny(tmp_path, n_epochs=1, algorithm=["ppo", "a2c"]), multirun=True, silent=True)
    assert [c.algorithm._target_.rsplit(".", 1)[-1] for c in rc.configs] == ["PPOAlgorithmConfig",
                                                                             "A2CAlgorithmConfig"]
    table = rc.train()
    assert list(table.algorithm) == ["ppo", "a2c"]


# ---- torch threads of blocking training -------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, overrides, expected", [
    ({}, {}, 1),                                # the config's torch_threads: 1, as for train_async
    ({}, {"torch_threads": 2}, 2),              # configurable
    ({"torch_threads": None}, {}, 3),           # None keeps the thread count the caller has
])
def test_blocking_train_uses_the_thread_policy_and_puts_it_back(tmp_path: Path, kwargs: dict, overrides: dict,
                                                                expected: int) -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        rc = RunContext(overrides=tiny(tmp_path, n_epochs=1, **overrides), silent=True)
        seen: list[int] = []
        rc.trainer.callbacks.append(lambda trainer, stats: seen.append(torch.get_num_threads()))
        rc.train(**kwargs)
        rc.close()
        assert seen == [expected]
        assert torch.get_num_threads() == 3  # the caller's setting is back
    finally:
        torch.set_num_threads(before)


def test_evaluate_compute_action_and_rollout_use_the_thread_policy_too(tmp_path: Path) -> None:
    """With torch's default thread count in a kernel, rc.evaluate() after training took 14-18 s instead of 0.2 s
    on this 2-core machine; the other calls that run the policy follow the config's torch_threads as train does."""
    import torch

    from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv
    from maze_lab.core.wrappers.wrapper import Wrapper

    seen: list[int] = []

    class ThreadsSeen(Wrapper):
        def step(self, action):
            seen.append(torch.get_num_threads())
            return self.env.step(action)

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        rc = RunContext(env=lambda: ThreadsSeen(GymMazeEnv("CartPole-v1")),
                        overrides=tiny(tmp_path, n_epochs=1, torch_threads=2), silent=True)
        rc.evaluate(n_episodes=1)
        rc.rollout(n_episodes=1, record_trajectory=False)
        assert seen and set(seen) == {2}
        observation = GymMazeEnv("CartPole-v1").reset(seed=0)[0]
        calls: list[int] = []
        policy = rc.trainer.policy
        original = policy.compute_action
        policy.compute_action = lambda *a, **k: (calls.append(torch.get_num_threads()), original(*a, **k))[1]
        assert rc.compute_action(observation, which="last")["action"] in (0, 1) and calls == [2]
        assert torch.get_num_threads() == 3  # the caller's setting is back
        rc.close()
    finally:
        torch.set_num_threads(before)


def test_train_async_defaults_to_the_config_thread_count(tmp_path: Path) -> None:
    rc = RunContext(overrides=tiny(tmp_path, n_epochs=1, torch_threads=2), silent=True)
    handle = rc.train_async()
    assert handle.torch_threads == 2
    handle.wait(timeout=300)
    rc.close()


# ---- one default location of runs ---------------------------------------------------------------------------------
def test_runs_go_to_the_project_root_from_any_subdirectory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from maze_lab.run.run_dir import default_outputs_dir, project_root

    monkeypatch.delenv("MAZE_LAB_OUTPUTS", raising=False)
    project = tmp_path / "project"
    (project / "notebooks" / "drafts").mkdir(parents=True)
    assert project_root(project / "notebooks" / "drafts") == project  # a notebooks/ folder marks the root
    assert default_outputs_dir(project / "notebooks") == project / "outputs"
    (project / "pyproject.toml").write_text("")
    (project / "src").mkdir()
    assert default_outputs_dir(project / "src") == project / "outputs"
    monkeypatch.chdir(project / "notebooks")
    rc = RunContext(overrides=TINY, silent=True)
    assert rc.config.log_base_dir == str(project / "outputs")
    assert rc.run_dir.parent.parent == project / "outputs"
    assert list_runs().run_dir.tolist() == [str(rc.run_dir)]  # list_runs() looks in the same place
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    assert default_outputs_dir(lonely) == lonely / "outputs"  # no project: the working directory


def test_maze_lab_outputs_names_the_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from maze_lab.run.run_dir import default_outputs_dir

    monkeypatch.setenv("MAZE_LAB_OUTPUTS", str(tmp_path / "all_runs"))
    assert default_outputs_dir() == tmp_path / "all_runs"
    assert RunContext(silent=True).config.log_base_dir == str(tmp_path / "all_runs")
    assert RunContext(overrides={"log_base_dir": "elsewhere"}, silent=True).config.log_base_dir == "elsewhere"
    monkeypatch.setenv("MAZE_LAB_OUTPUTS", "relative_runs")
    monkeypatch.chdir(tmp_path)
    assert default_outputs_dir() == tmp_path / "relative_runs"
