"""Loading a run from disk instantiates only what an allow-list holds: a ``config.yaml`` that names ``os.system``
(as the env, inside an argument, as a wrapper's sampling policy, as a model's activation) is refused by
``load_run(...).policy() / .rollout() / .env_factory()``, ``maze-lab rollout`` and resuming with ``input_dir``, and
the command never runs; ``trust=[...]`` / ``--trust`` admit a module of the user's own."""

from __future__ import annotations

import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from run_utils import TINY, run_maze_lab, train_tiny_run

from maze_lab.core.utils.factory import ConfigurationError, TrustError, TrustPolicy, locate, restricted
from maze_lab.run.run_context import RunContext
from maze_lab.run.runs import load_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished CartPole run (its checkpoints fit the default model)."""
    return train_tiny_run(tmp_path_factory.mktemp("trained"))


def tampered(trained: Path, tmp_path: Path, change: Callable[[dict], None]) -> Path:
    """A copy of the trained run whose config.yaml was changed by ``change``."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    for stale in ("stats.arrows", "tensorboard", "event_logs", "trajectories"):
        path = run / stale
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    change(cfg)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    return run


def command(marker: Path) -> dict:
    return {"_target_": "os.system", "command": f"touch {marker}"}


def _env(cfg: dict, marker: Path) -> None:
    cfg["env"] = command(marker)


def _env_argument(cfg: dict, marker: Path) -> None:
    cfg["env"]["render_mode"] = command(marker)


def _sampling_policy(cfg: dict, marker: Path) -> None:
    cfg["wrappers"] = {"ObservationNormalizationWrapper": {"sampling_policy": command(marker)}}


def _sampling_policy_name(cfg: dict, marker: Path) -> None:
    cfg["wrappers"] = {"ObservationNormalizationWrapper": {"sampling_policy": "os.system"}}


def _activation(cfg: dict, marker: Path) -> None:
    cfg["model"]["policy"]["networks"]["non_lin"] = "os.system"


def _wrapper(cfg: dict, marker: Path) -> None:
    cfg["wrappers"] = {"subprocess.Popen": {"args": ["touch", str(marker)]}}


def _distribution(cfg: dict, marker: Path) -> None:
    cfg["model"]["distribution_mapper_config"] = [{"action_head": "action", "distribution": "os.system"}]


PLACES = {
    "env": (_env, "env._target_ = 'os.system'"),
    "env argument": (_env_argument, "env.render_mode._target_ = 'os.system'"),
    "sampling_policy": (_sampling_policy,
                        "wrappers.ObservationNormalizationWrapper.sampling_policy._target_ = 'os.system'"),
    "sampling_policy by name": (_sampling_policy_name,
                                "wrappers.ObservationNormalizationWrapper.sampling_policy = 'os.system'"),
    "activation": (_activation, "model.policy.networks.non_lin = 'os.system'"),
    "wrapper": (_wrapper, "wrappers.subprocess.Popen = 'subprocess.Popen'"),
    "distribution": (_distribution, "model.distribution_mapper_config[0].distribution = 'os.system'"),
}


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("call", ["policy", "rollout", "env_factory"])
def test_a_command_in_config_yaml_is_refused_and_never_runs(trained: Path, tmp_path: Path, place: str,
                                                            call: str) -> None:
    marker = tmp_path / "command_ran"
    change, key = PLACES[place]
    run = tampered(trained, tmp_path, lambda cfg: change(cfg, marker))
    if call == "env_factory" and place in ("activation", "distribution"):
        load_run(run).env_factory().build_env().close()  # the env itself is fine; the model is not built here
        return
    actions = {"policy": lambda r: r.policy(), "rollout": lambda r: r.rollout(1, record_trajectory=False),
               "env_factory": lambda r: r.env_factory().build_env()}
    with pytest.raises(TrustError) as info:
        actions[call](load_run(run))
    message = str(info.value)
    assert f"config.yaml: {key} was refused" in message
    assert "can run commands" in message and "cannot be allowed" in message
    assert not marker.exists()


@pytest.mark.parametrize("place", ["env", "sampling_policy"])
def test_maze_lab_rollout_refuses_it_in_one_line(trained: Path, tmp_path: Path, place: str) -> None:
    marker = tmp_path / "command_ran"
    change, key = PLACES[place]
    run = tampered(trained, tmp_path, lambda cfg: change(cfg, marker))
    proc = run_maze_lab("rollout", str(run), "--no-record", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("maze-lab rollout: error: ")
    assert key in lines[0] and "Traceback" not in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("place", ["env", "env argument", "sampling_policy"])
def test_resuming_from_it_is_refused(trained: Path, tmp_path: Path, place: str) -> None:
    marker = tmp_path / "command_ran"
    change, key = PLACES[place]
    run = tampered(trained, tmp_path, lambda cfg: change(cfg, marker))
    outputs = tmp_path / "outputs"
    with pytest.raises(TrustError, match=rf"config\.yaml: {key.replace('.', '[.]')} was refused"):
        RunContext(overrides={**TINY, "input_dir": str(run), "log_base_dir": str(outputs)}, silent=True)
    proc = run_maze_lab("train", f"input_dir={run}", f"log_base_dir={outputs}", *(f"{k}={v}" for k, v in TINY.items()),
                    cwd=tmp_path)
    assert proc.returncode == 2 and key in proc.stderr and "Traceback" not in proc.stderr
    assert not outputs.exists()  # refused before a run directory was made
    assert not marker.exists()


def test_names_off_the_allow_list_are_not_even_imported(trained: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "side_effect_on_import.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Env: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tampered(trained, tmp_path, lambda cfg: cfg.__setitem__("env", {"_target_": "side_effect_on_import.Env"}))
    with pytest.raises(TrustError, match="If you trust this run directory, allow it with load_run"):
        load_run(run).env_factory()
    assert not marker.exists() and "side_effect_on_import" not in sys.modules


def test_a_gymnasium_id_that_imports_a_module_is_refused(trained: Path, tmp_path: Path) -> None:
    run = tampered(trained, tmp_path, lambda cfg: cfg["env"].__setitem__("name", "side_effect_on_import:Env-v0"))
    with pytest.raises(TrustError, match=r"env\.name = 'side_effect_on_import:Env-v0' was refused: Gymnasium would "
                                         r"import the module 'side_effect_on_import'"):
        load_run(run).env_factory().build_env()


@pytest.mark.parametrize("name", [
    "maze_lab.agent.composers.policies.ProbabilisticPolicyComposer",
    "maze_lab.core.wrappers.gym_maze_env.make_gym_maze_env",
    "maze_lab.examples.cutting2d.make_masked_env",
    "torch.nn.Tanh",
    "torch.nn.modules.activation.ELU",
    "gymnasium.make",
    "gymnasium.spaces.Box",
])
def test_the_allow_list_admits_maze_lab_classes_torch_modules_and_gymnasium(name: str) -> None:
    with restricted(TrustPolicy()):
        assert locate(name) is not None


@pytest.mark.parametrize("name, reason", [
    ("os.system", "objects of 'os' can run commands"),
    ("builtins.eval", "objects of 'builtins' can run commands"),
    ("builtins.exec", "objects of 'builtins' can run commands"),
    ("subprocess.run", "objects of 'subprocess' can run commands"),
    ("importlib.import_module", "objects of 'importlib' can run commands"),
    ("torch.hub.load", "objects of 'torch.hub' can run commands"),
    ("torch.load", "'torch' is not on the allow-list"),
    ("torch.nn.functional.relu", "it is torch.nn.functional.relu, which is not on the allow-list"),
    ("numpy.load", "'numpy' is not on the allow-list"),
    ("maze_lab.cli.main", "'maze_lab.cli' starts runs, processes or notebooks"),
    ("maze_lab.run.runs.load_run", "'maze_lab.run' starts runs, processes or notebooks"),
    ("maze_lab.core.utils.factory.locate", "'maze_lab.core.utils' starts runs"),
    ("maze_lab.RunContext", "it is maze_lab.run.run_context.RunContext, which is not on the allow-list"),
    ("maze_lab.core.wrappers.gym_maze_env.gym", "it is the module gymnasium, not a class or function"),
    ("maze_lab.core.wrappers.gym_maze_env.make_gym_maze_env.__globals__", "not a class or function"),
    ("maze_lab.agent.torch_policy.torch.load", "it is torch.serialization.load, which is not on the allow-list"),
])
def test_the_allow_list_refuses_everything_else(name: str, reason: str) -> None:
    with restricted(TrustPolicy()), pytest.raises(ConfigurationError) as info:
        locate(name)
    assert reason in str(info.value)


def test_without_a_policy_names_resolve_as_before() -> None:
    import os

    assert locate("os.path.join") is os.path.join  # the caller's own configuration is not restricted


@pytest.mark.parametrize("trust, message", [
    (["os"], "trust entry 'os' cannot be trusted"),
    (["subprocess.run"], "trust entry 'subprocess.run' cannot be trusted"),
    (["builtins"], "trust entry 'builtins' cannot be trusted"),
    (["my project"], "trust entry 'my project' is not a module or dotted name"),
])
def test_trusting_what_runs_commands_is_refused(trained: Path, trust: list[str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_run(trained, trust=trust)


USER_MODULE = '''
"""A project of the user's own: an env factory (and os.system, imported)."""
from os import system  # noqa: F401 - trusting this module must not make os.system reachable through it

from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv


def make_env():
    return GymMazeEnv("CartPole-v1")
'''


@pytest.fixture(scope="module")
def user_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run trained in this process from the user's own module (which needs no trust here); and the module's
    directory."""
    code = tmp_path_factory.mktemp("code")
    (code / "my_maze_project").mkdir()
    (code / "my_maze_project" / "__init__.py").write_text(textwrap.dedent(USER_MODULE))
    sys.path.insert(0, str(code))
    try:
        base = tmp_path_factory.mktemp("user_runs")
        rc = RunContext(env={"_target_": "my_maze_project.make_env"}, overrides={**TINY, "log_base_dir": str(base)},
                        silent=True)
        rc.train()
        rc.close()
        yield rc.run_dir, code
    finally:
        sys.path.remove(str(code))
        sys.modules.pop("my_maze_project", None)


def test_trust_admits_a_module_of_the_users_own(user_run: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, code = user_run
    sys.path.insert(0, str(code))
    try:
        with pytest.raises(TrustError) as info:
            load_run(run_dir).rollout(1, record_trajectory=False)
        assert "config.yaml: env._target_ = 'my_maze_project.make_env' was refused: 'my_maze_project' is not on the " \
               "allow-list" in str(info.value)
        assert "allow it with load_run(run_dir, trust=['my_maze_project'])" in str(info.value)
        result = load_run(run_dir, trust=["my_maze_project"]).rollout(1, record_trajectory=False)
        assert len(result.episode_lengths) == 1
        # trusting the module trusts what it defines, not what it imports
        with restricted(TrustPolicy(["my_maze_project"])), pytest.raises(TrustError, match="cannot be allowed"):
            locate("my_maze_project.system")
    finally:
        sys.path.remove(str(code))
    refused = run_maze_lab("rollout", str(run_dir), "--no-record", cwd=tmp_path, pythonpath=code)
    assert refused.returncode == 2 and "--trust my_maze_project" in refused.stderr
    allowed = run_maze_lab("rollout", str(run_dir), "--no-record", "--trust", "my_maze_project", cwd=tmp_path,
                       pythonpath=code)
    assert allowed.returncode == 0, allowed.stderr
    assert "1 episode(s) of the best policy: mean reward" in allowed.stdout


def test_resuming_trusts_the_names_of_the_new_runs_own_config(user_run: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, code = user_run
    sys.path.insert(0, str(code))
    try:
        overrides = {**TINY, "input_dir": str(run_dir), "log_base_dir": str(tmp_path / "outputs")}
        # the same env as the earlier run: its names are the caller's own
        RunContext(env={"_target_": "my_maze_project.make_env"}, overrides=overrides, silent=True)
        with pytest.raises(TrustError, match=r"RunContext\(\.\.\., trust=\['my_maze_project'\]\)"):
            RunContext(overrides=overrides, silent=True)
        RunContext(overrides=overrides, silent=True, trust=["my_maze_project"])
        RunContext(overrides=overrides, silent=True, config_module="my_maze_project")
    finally:
        sys.path.remove(str(code))
