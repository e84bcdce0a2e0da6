"""How a run's trainer is built: the trainer class of an algorithm config, the model, and one builder per kind of
training (the trainer's own workers, rollout workers, recorded data, a vector env in this process), chosen from a
registry by :func:`training_kind`. The run (``maze_lab.run.training_run._Run``) makes the writers and the evaluation
env, and owns and closes what is built here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.utils.log import get_logger
from maze_lab.run.config import build_algorithm_config
from maze_lab.run.run_dir import RunDirectory

_log = get_logger(__name__)

TRAINERS = {
    # algorithm config class (its torch-free module) -> the trainer class that takes it
    "maze_lab.train.trainers.common.config.PPOAlgorithmConfig": "maze_lab.train.trainers.ppo.PPO",
    "maze_lab.train.trainers.common.config.A2CAlgorithmConfig": "maze_lab.train.trainers.a2c.A2C",
    "maze_lab.train.trainers.sac.config.SACAlgorithmConfig": "maze_lab.train.trainers.sac.SAC",
    "maze_lab.train.trainers.impala.config.ImpalaAlgorithmConfig": "maze_lab.train.trainers.impala.IMPALA",
    "maze_lab.train.trainers.es.config.ESAlgorithmConfig": "maze_lab.train.trainers.es.ES",
    "maze_lab.train.trainers.bc.config.BCAlgorithmConfig": "maze_lab.train.trainers.bc.BC",
}


def trainer_class(algorithm: Any) -> type:
    """The trainer class of an algorithm config object (ConfigurationError naming the valid ones otherwise)."""
    from hydra.utils import get_class

    for config_path, trainer_path in TRAINERS.items():
        if isinstance(algorithm, get_class(config_path)):
            return get_class(trainer_path)
    valid = ", ".join(path.rsplit(".", 1)[1] for path in TRAINERS)
    raise ConfigurationError(f"algorithm must be an algorithm config of a trainer (valid: {valid}), got "
                             f"{type(algorithm).__name__}")


def run_algorithm_object(algorithm: Any, config: DictConfig) -> Any:
    """An algorithm config object as a run trains with it: the root ``seed`` where the object has none and the root
    ``n_epochs`` where one is set, as for an algorithm given by name or dict (a copy; the user's object is left
    alone)."""
    from maze_lab.run.config import root_int

    if not dataclasses.is_dataclass(algorithm):
        return algorithm
    names = {f.name for f in dataclasses.fields(algorithm)}
    changes: dict[str, Any] = {}
    if "seed" in names and algorithm.seed is None:
        seed = root_int(config, "seed", "an int (or null: unseeded)")
        if seed is not None:
            changes["seed"] = seed
    n_epochs = root_int(config, "n_epochs", "an int >= 0 (0 or null: until early stopping)")
    if "n_epochs" in names and n_epochs is not None:
        changes["n_epochs"] = n_epochs
    return dataclasses.replace(algorithm, **changes) if changes else algorithm



def algorithm_config(config: DictConfig, objects: dict[str, Any]) -> Any:
    """The algorithm config object a run trains with: the one given (checked), else built from ``config``."""
    obj = objects.get("algorithm")
    if obj is not None:
        trainer_class(obj)  # refuses what no trainer takes, naming the valid ones
        return obj
    return build_algorithm_config(config)


def vector_env_class(runner: Any) -> type | None:
    """The vector env class of ``runner.vector_env`` (None for ``ray`` and ``processes``: rollout workers)."""
    from maze_lab.train.vector_env import SequentialVectorEnv, SubprocVectorEnv

    venv_cls = {"sequential": SequentialVectorEnv, "subprocess": SubprocVectorEnv}.get(runner.vector_env)
    if venv_cls is None and runner.vector_env not in ("ray", "processes"):
        raise ConfigurationError(f"runner.vector_env must be 'sequential', 'subprocess', 'processes' or 'ray', "
                                 f"got '{runner.vector_env}'")
    return venv_cls


def build_model(config: DictConfig, objects: dict[str, Any], env: Any, graph_dir: Path) -> Any:
    """The actor-critic for the spaces of ``env``: the model object given, or composed from the model config (with
    a critic object where one is given); the composer's graphs go into ``graph_dir``."""
    from maze_lab.agent.composers import build_model_composer
    from maze_lab.agent.torch_actor_critic import TorchActorCritic

    obj = objects.get("model")
    device = OmegaConf.select(config, "algorithm.device", default="cpu")
    if isinstance(obj, TorchActorCritic):
        return obj
    model_cfg = obj if obj is not None else OmegaConf.to_container(config.model)
    if isinstance(model_cfg, dict) and "critic" in objects:
        model_cfg = {**model_cfg, "critic": objects["critic"]}
    composer = build_model_composer(model_cfg, env.action_spaces_dict, env.observation_spaces_dict,
                                    env.agent_counts_dict)
    try:
        composer.save_graphs(graph_dir)
    except Exception as err:  # noqa: BLE001 - a graph that cannot be drawn must not stop training
        _log.warning(f"model graphs not written: {err}")
    return composer.actor_critic(device=device)


@dataclasses.dataclass
class BuildParts:
    """What every kind of training is built from (see ``_Run._build``). A builder puts the training env it makes into
    ``train_env`` as soon as it exists, so that the run closes it where the build fails after that."""

    config: DictConfig
    objects: dict[str, Any]
    algorithm: Any
    trainer_cls: type
    evaluator: Any
    writers: list
    eval_env: Any
    venv_cls: type | None
    env_factory: Callable[[int, str], Any]
    """A picklable factory of env ``index`` with the statistics prefix ``prefix`` (``_Run.env_factory``)."""
    run_directory: RunDirectory
    train_env: Any = None

    def model(self, env: Any) -> Any:
        """The run's model for the spaces of ``env`` (see :func:`build_model`)."""
        return build_model(self.config, self.objects, env, self.run_directory.graph_dir)


def training_kind(trainer_cls: type, runner: Any) -> str:
    """How the run trains: the trainer's own workers, rollout workers (ray, processes), recorded data, or a vector
    env in this process."""
    if getattr(trainer_cls, "uses_env_factories", False):
        return "own_workers"
    if runner.vector_env in ("ray", "processes"):
        return "rollout_workers"
    if getattr(trainer_cls, "learns_from_data", False):
        return "data"
    return "vector_env"


# ---- how a trainer is built, by the kind of training ---------------------------------------------------------------
def build_with_own_workers(parts: BuildParts) -> Any:
    """A trainer that runs its envs in its own workers (ES workers, IMPALA actors): one env factory per env; its
    worker statistics object stands where the training vector env would. With runner=ray (ES, IMPALA) the
    workers are runner.n_workers Ray actors (ES: one env each; IMPALA: envs_per_worker actors each), started at
    the first train() on the Ray runner.address says."""
    runner, algorithm, trainer_cls = parts.config.runner, parts.algorithm, parts.trainer_cls
    ray_workers: dict[str, Any] = {}
    if runner.vector_env == "ray":
        from maze_lab.train.ray_config import RayWorkerSettings

        settings = RayWorkerSettings.from_runner(runner)
        per_worker = 1 if getattr(trainer_cls, "one_env_per_ray_worker", False) else settings.envs_per_worker
        n_envs = settings.n_workers * per_worker
        ray_workers = dict(workers="ray", ray=settings)
    else:
        n_envs = int(getattr(algorithm, "num_actors", 0) or runner.concurrency)
    trainer = trainer_cls(algorithm, parts.model(parts.eval_env),
                          env_factories=[parts.env_factory(i, "train") for i in range(n_envs)],
                          evaluator=parts.evaluator, writers=parts.writers,
                          checkpoint_dir=parts.run_directory.checkpoint_dir, **ray_workers)
    parts.train_env = trainer.env
    return trainer


def build_with_rollout_workers(parts: BuildParts) -> Any:
    """A2C/PPO rollouts in Ray actors (runner=ray: maze_lab.train.ray_rollouts starts or joins Ray as
    runner.address says) or in local worker processes (runner=processes, started at the first rollout: the
    learner stays here, so a run trained in a kernel leaves the kernel's interpreter free while the workers
    roll out). The evaluation env gives the model its spaces."""
    runner = parts.config.runner
    if runner.vector_env == "ray":
        from maze_lab.train.ray_rollouts import ray_rollout_generator as make_generator
    else:
        from maze_lab.train.process_rollouts import process_rollout_generator as make_generator
    generator = make_generator(runner, parts.trainer_cls, lambda i: parts.env_factory(i, "train"), parts.writers,
                               parts.eval_env)
    parts.train_env = generator.env
    return parts.trainer_cls(parts.algorithm, parts.model(parts.eval_env), rollout_generator=generator,
                             evaluator=parts.evaluator, writers=parts.writers,
                             checkpoint_dir=parts.run_directory.checkpoint_dir)


def build_from_data(parts: BuildParts) -> Any:
    """Behavioural cloning reads its recorded episodes (algorithm.dataset), not a training env: none is built;
    the evaluation env gives the model its spaces and checks that the episodes fit them. With
    n_eval_episodes=0 models are selected by validation loss; the evaluator stays for RunContext.evaluate."""
    from maze_lab.run.config import imitation_dataset_dir

    algorithm = parts.algorithm
    parts.train_env = None
    return parts.trainer_cls(algorithm, parts.model(parts.eval_env),
                             dataset=imitation_dataset_dir(algorithm.dataset),
                             evaluator=parts.evaluator if algorithm.n_eval_episodes else None,
                             writers=parts.writers, checkpoint_dir=parts.run_directory.checkpoint_dir)


def build_with_vector_env(parts: BuildParts) -> Any:
    """A trainer stepping a vector env of runner.concurrency envs in this process (sequential) or in
    subprocesses (subprocess)."""
    train_env = parts.train_env = parts.venv_cls(
        [parts.env_factory(i, "train") for i in range(int(parts.config.runner.concurrency))],
        logging_prefix="train", writers=parts.writers)
    return parts.trainer_cls(parts.algorithm, parts.model(train_env), env=train_env, evaluator=parts.evaluator,
                             writers=parts.writers, checkpoint_dir=parts.run_directory.checkpoint_dir)


TRAINER_BUILDERS: dict[str, Callable[[BuildParts], Any]] = {
    "own_workers": build_with_own_workers,
    "rollout_workers": build_with_rollout_workers,
    "data": build_from_data,
    "vector_env": build_with_vector_env,
}
"""The builder of each kind of training (see :func:`training_kind`)."""


def build_trainer(parts: BuildParts) -> Any:
    """The trainer of ``parts``, built by the builder of its kind of training."""
    return TRAINER_BUILDERS[training_kind(parts.trainer_cls, parts.config.runner)](parts)
