"""``maze-lab runs``, the control of live runs (``stop``, ``pause``, ``resume``, ``checkpoint``) and ``rollout``."""

from __future__ import annotations

import argparse
from pathlib import Path

from maze_lab.cli.errors import EXIT_BAD_INPUT, _report, _report_fault, _run_fault_types
from maze_lab.run.commands import BadInput


# ---- runs ----------------------------------------------------------------------------------------------------
def _runs(args: argparse.Namespace) -> int:
    from maze_lab.run.run_dir import default_outputs_dir
    from maze_lab.run.runs import list_runs

    base = Path(args.base) if args.base is not None else default_outputs_dir()
    if not base.is_dir():
        if args.base is None:
            print(f"no runs yet: {base} does not exist (the default location of runs; see maze-lab runs --help)")
            return 0
        raise BadInput(f"{base} is not a directory; give the base directory of the runs with --base "
                       f"(the log_base_dir of the runs; default {default_outputs_dir()})")
    df = list_runs(base, group=args.group)
    if df.empty:
        print(f"no runs under {base}" + (f" in group {args.group}" if args.group else ""))
        return 0
    columns = ["created", "experiment", "status", "live", "algorithm", "env", "epoch", "env_steps",
               "best_eval_reward", "final_train_reward", "run_dir"]
    df = df.assign(live=df.live.map(lambda v: "live" if v is True else "-"))
    if df.group.notna().any():  # runs made together (sweeps, batches, studies) show their group; single runs "-"
        columns.insert(2, "group")
        df = df.assign(group=df.group.fillna("-"))
    damaged = df[df.status == "damaged"]
    print(df[columns].to_string(index=False))
    if not damaged.empty:
        print(f"\n{len(damaged)} damaged run director{'y' if len(damaged) == 1 else 'ies'}:")
        for run_dir, reason in zip(damaged.run_dir, damaged.reason, strict=True):
            print(f"  {run_dir}: {reason}")
    ended = df[df.status.isin(["died", "failed", "early-stopped", "interrupted"])]
    if not ended.empty:
        print("\nhow runs ended:")
        for run_dir, status, reason in zip(ended.run_dir, ended.status, ended.reason, strict=True):
            print(f"  {run_dir}: {status}: {reason or 'no reason recorded'}")
    return 0


# ---- control of live runs ----------------------------------------------------------------------------------------
_CONTROL_DONE = {"stop": "ended", "pause": "paused", "resume": "resumed", "checkpoint": "checkpoint written"}


def _control(args: argparse.Namespace) -> int:
    from maze_lab.run.attach import request_run
    from maze_lab.run.run_dir import NotARunDirectoryError
    from maze_lab.run.run_status import RunControlError

    try:
        state = request_run(args.run_dir, args.command, timeout=args.timeout)
    except (RunControlError, NotARunDirectoryError) as err:
        _report(args, err)
        return EXIT_BAD_INPUT if isinstance(err, NotARunDirectoryError) else 1
    extra = ""
    if args.command == "stop":
        ckpt = Path(args.run_dir) / "checkpoints" / "state_dict_last.pt"
        extra = f" (status {state.get('status')}; checkpoint {ckpt if ckpt.exists() else 'none'})"
    elif args.command == "checkpoint":
        extra = f": {(state.get('control') or {}).get('checkpoint')}"
    print(f"maze-lab {args.command}: {args.run_dir}: {_CONTROL_DONE[args.command]}{extra}")
    return 0


# ---- rollout -------------------------------------------------------------------------------------------------
def _trained_what(run: object) -> str:
    """``env CartPole-v1, algorithm PPO, model ...`` of a loaded run (its config)."""
    from maze_lab.run.config import describe_run

    try:
        return describe_run(run.config).split(", runner ", 1)[0]  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a config this line cannot read is reported when the run is built
        return "its recorded configuration"


def _rollout(args: argparse.Namespace) -> int:
    from maze_lab.run.progress import CountProgress
    from maze_lab.run.runs import load_run

    run = load_run(args.run_dir, trust=args.trust)
    split = args.workers != 1 or args.ray
    workers = f", {args.workers} {'parts on Ray workers' if args.ray else 'worker processes'}" if split else ""
    print(f"maze-lab rollout: {args.episodes} episode(s) of the {args.which} policy "
          f"({'sampled' if args.sample else 'most likely'} actions) of {args.run_dir}: {_trained_what(run)}, "
          f"seed {args.seed}{workers}; "
          f"{'not recorded' if args.no_record else 'recorded into ' + str(run.directory.trajectory_dir)}", flush=True)
    try:
        if not args.no_record:
            run.checked_trajectory_dir()  # episodes go only into the run (never through a symlink leading out)
        with CountProgress(args.episodes, "rollout", "episode") as progress:
            if args.workers != 1 or args.ray:  # episodes split over processes or Ray workers, seeded as in one process
                from maze_lab.train.ray_rollouts import rollout_loaded_run

                result = rollout_loaded_run(run, args.episodes, args.workers,
                                            backend="ray" if args.ray else "processes", which=args.which,
                                            deterministic=not args.sample, seed=args.seed,
                                            record_trajectory=not args.no_record, address=args.address,
                                            on_episodes=progress.advance)
            else:
                rewards: list[float] = []

                def episode_done(reward: float, length: int) -> None:
                    rewards.append(reward)
                    progress.advance(1, f"last {reward:.4g} ({length} steps), mean {sum(rewards) / len(rewards):.4g}")

                result = run.rollout(n_episodes=args.episodes, which=args.which, deterministic=not args.sample,
                                     seed=args.seed, record_trajectory=not args.no_record, on_episode=episode_done)
    except (FileNotFoundError, ValueError) as err:
        raise BadInput(str(err)) from err
    except _run_fault_types() as err:  # e.g. a full disk: the episodes written before are kept
        _report_fault(args, err, "")
        return 1
    lengths = ", ".join(str(n) for n in result.episode_lengths)
    print(f"{args.episodes} episode(s) of the {args.which} policy: mean reward {result.mean_reward:.3f} "
          f"(lengths {lengths})")
    if not args.no_record:
        print(f"trajectories: {run.directory.trajectory_dir}")
    return 0
