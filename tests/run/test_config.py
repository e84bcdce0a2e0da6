"""Configuration: groups, experiments, user config packages, interpolation, checked overrides."""

from __future__ import annotations

import sys
import textwrap

import pytest
from conf_options import listed_options

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.run.config import available_options, compose_config, parse_cli_overrides


def test_builtin_groups_and_options():
    options = available_options()
    assert {"gym_env", "cutting2d_flat", "cutting2d_struct", "cutting2d_struct_masked"} <= set(options["env"])
    assert {"a2c", "bc", "ppo", "sac", "sacfd"} <= set(options["algorithm"])
    assert options["algorithm"] == sorted(options["algorithm"]) == listed_options("algorithm").split(", ")
    assert {"dev", "local"} <= set(options["runner"])
    assert {"cartpole_ppo", "cutting2d_masked_ppo"} <= set(options["experiment"])


def test_defaults_and_group_selection():
    cfg = compose_config()
    assert cfg.env.name == "CartPole-v1" and cfg.algorithm._target_.endswith("PPOAlgorithmConfig")
    cfg = compose_config({"algorithm": "a2c", "runner": "local"}, {"env.name": "Pendulum-v1"})
    assert cfg.algorithm._target_.endswith("A2CAlgorithmConfig") and cfg.algorithm.lr == 0.0005
    assert cfg.runner.vector_env == "subprocess" and cfg.env.name == "Pendulum-v1"


def test_experiment_file_overrides_groups_and_values():
    cfg = compose_config(experiment="cutting2d_masked_ppo")
    assert cfg.env._target_ == "maze_lab.examples.cutting2d.make_masked_env"
    assert cfg.model.critic._target_.endswith("StepStateCriticComposer")
    assert cfg.algorithm.n_rollout_steps == 64 and cfg.experiment_name == "cutting2d_masked_ppo"


def test_experiment_has_one_meaning_everywhere(tmp_path):
    """experiment=NAME picks the experiment file whether it comes as an argument, an override (as RunContext's
    overrides pass it) or on the command line; the runs' folder is named by experiment_name."""
    from maze_lab.run.run_context import RunContext

    by_override = compose_config(overrides={"experiment": "cartpole_ppo"})
    assert by_override.runner.concurrency == 8 and by_override.algorithm.n_rollout_steps == 32
    assert by_override.experiment_name == "cartpole_ppo" and "experiment" not in by_override
    assert by_override == compose_config(experiment="cartpole_ppo")
    named = compose_config(overrides={"experiment_name": "mine"})
    assert named.experiment_name == "mine" and named.runner.concurrency == 2  # only the folder's name
    both = compose_config(overrides={"experiment": "cartpole_ppo", "experiment_name": "mine"})
    assert both.experiment_name == "mine" and both.runner.concurrency == 8
    rc = RunContext(overrides={"experiment_name": "mine", "log_base_dir": str(tmp_path)}, silent=True)
    assert rc.run_dir.parent == tmp_path / "mine"
    with pytest.raises(ConfigurationError, match="unknown option 'my_runs' for config group 'experiment'.*"
                                                 "to name the runs' folder set experiment_name=my_runs"):
        compose_config(overrides={"experiment": "my_runs"})
    with pytest.raises(ConfigurationError, match="two experiments given"):
        compose_config(overrides={"experiment": "pendulum_sac"}, experiment="cartpole_ppo")
    with pytest.raises(ConfigurationError, match="picks an experiment file by name"):
        compose_config(overrides={"experiment": 3})


def test_an_experiment_file_with_a_root_experiment_key_is_refused(tmp_path, monkeypatch):
    package = tmp_path / "old_experiments"
    (package / "experiment").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "experiment" / "old.yaml").write_text("# @package _global_\nexperiment: old\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError, match="root key 'experiment' .*experiment_name: old"):
        compose_config(experiment="old", config_modules=["old_experiments"])


def test_composition_repeats_in_one_process():
    first = [compose_config({"algorithm": a}).algorithm._target_ for a in ("a2c", "ppo", "a2c")]
    assert first[0] == first[2] != first[1]


def test_unknown_group_option_and_key_list_valid_choices():
    with pytest.raises(ConfigurationError, match="unknown config group 'algo'; valid groups: env, wrappers, model"):
        compose_config({"algo": "ppo"})
    with pytest.raises(ConfigurationError, match="unknown option 'ppo2' for config group 'algorithm'; valid options: "
                                                 + listed_options("algorithm")):
        compose_config({"algorithm": "ppo2"})
    with pytest.raises(ConfigurationError, match="unknown option 'nope' for config group 'experiment'"):
        compose_config(experiment="nope")
    with pytest.raises(ConfigurationError, match="unknown config key 'algorithm.lrr'; valid keys in 'algorithm': .*lr"):
        compose_config(overrides={"algorithm.lrr": 0.1})
    with pytest.raises(ConfigurationError, match="unknown config key 'runnr.concurrency': 'runnr' is not in the root "
                                                 "config; valid keys there: .*runner"):
        compose_config(overrides={"runnr.concurrency": 2})


def test_wrong_type_names_key_and_expected_type():
    with pytest.raises(ConfigurationError, match="override 'algorithm.lr': expected a value of type float .* got str"):
        compose_config(overrides={"algorithm.lr": "fast"})
    with pytest.raises(ConfigurationError, match="'runner.concurrency': expected a value of type int .* got float 2.5"):
        compose_config(overrides={"runner.concurrency": 2.5})
    with pytest.raises(ConfigurationError, match="'algorithm.deterministic_eval': expected a value of type bool"):
        compose_config(overrides={"algorithm.deterministic_eval": "yes"})


def test_schedules_and_free_form_sections_accept_new_values():
    cfg = compose_config(overrides={"algorithm.lr": {"type": "linear", "start": 1e-3, "end": 0.0},
                                    "wrappers.TimeLimitWrapper": {"max_episode_steps": 10},
                                    "env.max_episode_steps": 50})
    assert cfg.algorithm.lr.type == "linear" and cfg.wrappers.TimeLimitWrapper.max_episode_steps == 10
    assert cfg.env.max_episode_steps == 50


def test_dict_components_replace_a_group():
    cfg = compose_config({"env": {"_target_": "maze_lab.core.wrappers.gym_maze_env.make_gym_maze_env",
                                  "name": "Acrobot-v1"},
                          "critic": {"_target_": "maze_lab.agent.composers.critics.StepStateCriticComposer",
                                     "networks": []}})
    assert cfg.env.name == "Acrobot-v1" and cfg.model.critic._target_.endswith("StepStateCriticComposer")


def test_user_config_package_and_interpolation(tmp_path, monkeypatch):
    pkg = tmp_path / "my_project_conf"
    (pkg / "env").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "env" / "my_pendulum.yaml").write_text(textwrap.dedent("""
        _target_: maze_lab.core.wrappers.gym_maze_env.make_gym_maze_env
        name: Pendulum-v1
        max_episode_steps: ${runner.concurrency}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert "my_pendulum" in available_options(["my_project_conf"])["env"]
        cfg = compose_config({"env": "my_pendulum"}, {"runner.concurrency": 3}, config_modules=["my_project_conf"])
        assert cfg.env.name == "Pendulum-v1"
        assert cfg.env.max_episode_steps == 3  # interpolation resolved after the overrides
        with pytest.raises(ConfigurationError, match="config module 'no_such_conf' cannot be imported"):
            compose_config(config_modules=["no_such_conf"])
    finally:
        sys.modules.pop("my_project_conf", None)


def test_cli_override_parsing():
    components, overrides = parse_cli_overrides(["algorithm=a2c", "algorithm.lr=0.001", "env.name=Pendulum-v1",
                                                 "+experiment=cartpole_ppo", "model.policy.networks=[1, 2]"])
    assert components == {"algorithm": "a2c", "experiment": "cartpole_ppo"}
    assert overrides == {"algorithm.lr": 0.001, "env.name": "Pendulum-v1", "model.policy.networks": [1, 2]}
    with pytest.raises(ConfigurationError, match="must look like key=value"):
        parse_cli_overrides(["algorithm"])


def test_overrides_follow_hydras_grammar() -> None:
    """Values read as Maze's (Hydra's) command line reads them; several values are a sweep, refused outside one."""
    from maze_lab.run.config import parse_override

    _, overrides = parse_cli_overrides(["algorithm.lr=1e-3", "env.name=ALE/Pong-v5", "algorithm.clip_range="
                                        "{type: linear, start: 0.2, end: 0.0}", "note='a,b'", "seed=01", "x=null"])
    assert overrides == {"algorithm.lr": 0.001, "env.name": "ALE/Pong-v5", "note": "a,b", "seed": "01", "x": None,
                         "algorithm.clip_range": {"type": "linear", "start": 0.2, "end": 0.0}}
    assert parse_override("seed=range(1,4)") == ("seed", [1, 2, 3], True)
    assert parse_override("model.hidden=[64,64],[32,32]") == ("model.hidden", [[64, 64], [32, 32]], True)
    assert parse_override("algorithm=choice(ppo,a2c)") == ("algorithm", ["ppo", "a2c"], True)
    with pytest.raises(ConfigurationError, match=r"gives 2 values: that is a sweep.*maze-lab sweep algorithm.lr=0.1"):
        parse_cli_overrides(["algorithm.lr=0.1,0.2"])
    with pytest.raises(ConfigurationError, match=r"interval\(\.\.\.\) is for hyperparameter search"):
        parse_override("algorithm.lr=interval(0.1,0.2)")
    with pytest.raises(ConfigurationError, match="is not valid override syntax"):
        parse_override("model.hidden=[64,64")
    with pytest.raises(ConfigurationError, match="deleting a key"):
        parse_override("~seed=1")


# ---- every field of the algorithm config is a key ----------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["ppo", "a2c"])
def test_every_algorithm_field_is_an_override_key(algorithm: str) -> None:
    import dataclasses

    from maze_lab.run.config import algorithm_config_class, build_algorithm_config

    cfg = compose_config({"algorithm": algorithm})
    cls = algorithm_config_class(cfg.algorithm._target_)
    for field in dataclasses.fields(cls):
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        if isinstance(default, bool):
            value = not default
        elif isinstance(default, int):
            value = default + 1
        elif isinstance(default, float):
            value = default / 2 if default else 0.5
        else:
            value = 11 if field.name == "seed" else default
        composed = compose_config({"algorithm": algorithm}, {f"algorithm.{field.name}": value})
        assert getattr(build_algorithm_config(composed), field.name) == value, field.name


def test_algorithm_fields_missing_from_the_yaml_are_checked() -> None:
    from maze_lab.run.config import build_algorithm_config

    cfg = compose_config(overrides={"algorithm.normalize_advantages": False, "algorithm.seed": 5})
    built = build_algorithm_config(cfg)
    assert built.normalize_advantages is False and built.seed == 5
    with pytest.raises(ConfigurationError, match="override 'algorithm.seed': expected a value of type int or None, "
                                                 "got str 'x'"):
        compose_config(overrides={"algorithm.seed": "x"})
    with pytest.raises(ConfigurationError, match="valid keys in 'algorithm': .*normalize_advantages.*seed"):
        compose_config(overrides={"algorithm.normalise_advantages": True})
    with pytest.raises(ConfigurationError, match="algorithm.rollout_evaluator is built by the run"):
        build_algorithm_config(compose_config(overrides={"algorithm.rollout_evaluator": {"_target_": "x"}}))


def test_light_algorithm_config_names_are_the_trainers_classes() -> None:
    from maze_lab.core.utils.factory import locate
    from maze_lab.run.config import _LIGHT_ALGORITHM_CONFIGS

    for name, light in _LIGHT_ALGORITHM_CONFIGS.items():
        assert locate(name) is locate(light)


def test_root_algorithm_seed_and_n_epochs_reach_the_algorithm_config() -> None:
    from maze_lab.run.config import build_algorithm_config

    built = build_algorithm_config(compose_config(overrides={"seed": 9, "n_epochs": 4}))
    assert built.seed == 9 and built.n_epochs == 4
    assert build_algorithm_config(compose_config(overrides={"seed": 9, "algorithm.seed": 3})).seed == 3


@pytest.mark.parametrize("overrides, message", [
    ({"algorithm.epoch_length": 0}, "algorithm config: PPOAlgorithmConfig: epoch_length must be >= 1, got 0"),
    ({"runner.vector_env": "threads"}, "runner.vector_env must be 'sequential' (runner=dev) or 'subprocess'"),
    ({"runner.eval_concurrency": 0}, "runner.eval_concurrency must be >= 1, got 0"),
    ({"n_epochs": -1}, "n_epochs must be >= 0"),
    ({"torch_threads": 0}, "torch_threads must be >= 1, or null for torch's default"),
])
def test_validate_config_names_what_is_wrong(overrides: dict, message: str) -> None:
    from maze_lab.run.config import validate_config

    with pytest.raises(ConfigurationError) as info:
        validate_config(compose_config(overrides=overrides))
    assert message in str(info.value)


def test_composing_imports_neither_torch_nor_matplotlib() -> None:
    import subprocess

    code = ("import sys\nfrom maze_lab.run.config import compose_config, validate_config\n"
            "validate_config(compose_config({'env': 'cutting2d_struct_masked'}, experiment='cutting2d_masked_ppo'))\n"
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_list_item_is_overridden_by_its_index_and_a_bad_index_says_how() -> None:
    cfg = compose_config({}, {"model.critic.networks.0.hidden_units": [64, 64]}, "pendulum_sac")
    assert list(cfg.model.critic.networks[0].hidden_units) == [64, 64]
    with pytest.raises(ConfigurationError, match=r"model.critic.networks is a list of 1 item\(s\); index it with 0..0 "
                                                 r".*or replace the whole list \('model.critic.networks=\[...\]'\)"):
        compose_config({}, {"model.critic.networks.3.hidden_units": [64]}, "pendulum_sac")
    with pytest.raises(ConfigurationError, match="expected a value of type list"):
        compose_config({}, {"model.critic.networks.0.hidden_units": "wide"}, "pendulum_sac")
