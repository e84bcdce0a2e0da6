"""``maze-run``: the Maze framework's command lines, run as their maze-lab equivalent."""

from __future__ import annotations

import shlex
import sys

from maze_lab.cli.errors import EXIT_BAD_INPUT
from maze_lab.run.commands import BadInput, one_line

# ---- maze-run: the Maze framework's command lines ---------------------------------------------------------------
_ROLLOUT_IGNORED = ("env", "wrappers", "model", "critic")
_ROLLOUT_RUNNER_KEYS = {"runner.n_episodes": "--episodes", "runner.record_trajectory": "--no-record",
                        "seed": "--seed"}


def translate_maze_run(words: list[str]) -> tuple[list[str], list[str]]:
    """The ``maze-lab`` arguments for a ``maze-run`` command line, and notes on what was left out.

    ``-cn conf_train`` trains (``-m``: a sweep); Maze's default ``conf_rollout`` with ``policy=torch_policy
    input_dir=RUN`` rolls out a trained run, and without a policy (Maze's random policy) on a Gymnasium env runs the
    random-policy demo. Anything without an equivalent raises BadInput naming what to use instead.
    """
    config_name, multirun, rest = "conf_rollout", False, []
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("-cn", "--config-name"):
            if i + 1 >= len(words):
                raise BadInput(f"{word} needs a config name (conf_train or conf_rollout)")
            config_name, i = words[i + 1], i + 2
            continue
        if word.startswith("--config-name="):
            config_name = word.split("=", 1)[1]
        elif word in ("-m", "--multirun"):
            multirun = True
        elif word.split("=", 1)[0] in ("-cp", "--config-path", "-cd", "--config-dir"):
            raise BadInput(f"{word}: maze-lab finds your config groups in an importable package; pass it with "
                           f"`maze-lab train --config-module my_project.conf`")
        elif word.startswith("-"):
            raise BadInput(f"maze-run option {word} has no maze-lab equivalent; see `maze-lab train --help` and "
                           f"`maze-lab sweep --help`")
        else:
            rest.append(word)
        i += 1
    if config_name == "conf_train":
        return ["sweep" if multirun else "train", *rest], []
    if config_name != "conf_rollout":
        raise BadInput(f"-cn {config_name}: maze-lab has one root config for training, conf_train (maze-run -cn "
                       f"conf_train = maze-lab train); add your own config groups with --config-module")
    if multirun:
        raise BadInput("maze-run -m with the rollout config has no maze-lab equivalent; run one "
                       "`maze-lab rollout RUN_DIR` per run")
    return _translate_rollout(rest)


def _translate_rollout(words: list[str]) -> tuple[list[str], list[str]]:
    values: dict[str, str] = {}
    for word in words:
        if "=" not in word:
            raise BadInput(f"'{word}' must look like key=value (e.g. policy=torch_policy input_dir=outputs/...)")
        key, value = word.split("=", 1)
        values[key.lstrip("+")] = value
    policy, input_dir = values.pop("policy", None), values.pop("input_dir", None)
    options: list[str] = []
    for key, flag in _ROLLOUT_RUNNER_KEYS.items():
        if key in values:
            value = values.pop(key)
            if flag == "--no-record":
                options += [flag] if value.lower() in ("false", "0", "no") else []
            else:
                options += [flag, value]
    if values.pop("runner", "sequential") not in ("sequential", "parallel"):
        raise BadInput("Maze's rollout runners are sequential and parallel; maze-lab rolls out in this process")
    if values.get("runner.render", "false").lower() in ("true", "1", "yes"):
        raise BadInput("maze-lab does not render rollouts live; rollouts are recorded into <run>/trajectories/, view "
                       "them with maze_lab.widgets.trajectory_viewer.TrajectoryViewer in a notebook")
    values.pop("runner.render", None)
    for key in ("runner.n_processes", "runner.max_episode_steps", "runner.record_event_logs"):
        values.pop(key, None)  # maze-lab's rollout runs in this process; episodes end with the env's own limit
    if policy in (None, "random_policy"):
        env, name = values.pop("env", "gym_env"), values.pop("env.name", None)
        leftover = sorted(k for k in values if k.split(".", 1)[0] not in _ROLLOUT_IGNORED)
        if env != "gym_env" or name is None or leftover:
            raise BadInput("without policy=torch_policy, maze-run rolls out a random policy; maze-lab's equivalent "
                           "is `maze-lab demo --env GYM_ID --episodes N` (Gymnasium envs: env=gym_env env.name=ID), "
                           "and maze_lab.core.rollout.SequentialRolloutRunner in Python for any env and policy")
        episodes = options[options.index("--episodes") + 1] if "--episodes" in options else None
        demo = ["demo", "--env", name, *(["--epochs", "1", "--episodes", episodes] if episodes else [])]
        return demo, [f"ignored: {k}" for k in sorted(values)]
    if policy != "torch_policy":
        raise BadInput(f"policy={policy}: maze-lab rolls out the policy of a trained run with `maze-lab rollout "
                       f"RUN_DIR` (Maze: policy=torch_policy input_dir=RUN_DIR); heuristic policies roll out with "
                       f"maze_lab.core.rollout.SequentialRolloutRunner in Python")
    if not input_dir:
        raise BadInput("policy=torch_policy needs input_dir=RUN_DIR, the run directory of the training run")
    unknown = sorted(k for k in values if k.split(".", 1)[0] not in _ROLLOUT_IGNORED)
    if unknown:
        raise BadInput(f"maze-run rollout setting(s) {', '.join(unknown)} have no maze-lab equivalent; "
                       f"`maze-lab rollout --help` lists what a rollout takes")
    notes = [f"the run's own {', '.join(sorted({k.split('.', 1)[0] for k in values}))} config is used "
             f"(from {input_dir}/config.yaml)"] if values else []
    return ["rollout", input_dir, *options], notes


def maze_run_main(argv: list[str] | None = None) -> int:
    """Entry point of ``maze-run``: runs the maze-lab equivalent of a Maze command line, saying which."""
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0] in ("-h", "--help"):
        print("maze-run: Maze's command line, run by maze-lab.\n"
              "  maze-run -cn conf_train [overrides]        = maze-lab train [overrides]\n"
              "  maze-run -cn conf_train -m key=a,b [...]   = maze-lab sweep key=a,b [...]\n"
              "  maze-run policy=torch_policy input_dir=RUN [runner.n_episodes=N] = maze-lab rollout RUN --episodes N\n"
              "  maze-run env=gym_env env.name=ID [runner.n_episodes=N]          = maze-lab demo --env ID --episodes N")
        return 0 if words else EXIT_BAD_INPUT
    try:
        translated, notes = translate_maze_run(words)
    except BadInput as err:
        print(f"maze-run: error: {one_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"maze-run: running `maze-lab {shlex.join(translated)}`", file=sys.stderr, flush=True)
    for note in notes:
        print(f"maze-run: {note}", file=sys.stderr, flush=True)
    from maze_lab.cli import main

    return main(translated)
