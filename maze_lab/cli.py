"""The ``maze-lab`` command."""

from __future__ import annotations

import argparse
import sys


def _demo(args: argparse.Namespace) -> int:
    from maze_lab.demo import run_demo

    run_demo(args.env, n_epochs=args.epochs, episodes_per_epoch=args.episodes, seed=args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per task."""
    parser = argparse.ArgumentParser(prog="maze-lab", description="maze-lab: a Jupyter-first RL workbench")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="random episodes through the full wrapper stack, statistics printed")
    demo.add_argument("--env", default="CartPole-v1", help="Gymnasium env id")
    demo.add_argument("--epochs", type=int, default=2)
    demo.add_argument("--episodes", type=int, default=5, help="episodes per epoch")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``maze-lab`` command."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
