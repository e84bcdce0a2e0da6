"""Evolution strategies (Salimans et al., 2017): a search over the policy's parameters, with no value function and
no backpropagation.

Each update (one ES iteration) perturbs the flat parameters theta with Gaussian noise drawn from a shared noise
table, lets the worker processes play an antithetic pair of episodes for each perturbation (theta + sigma * eps and
theta - sigma * eps), replaces the returns by their centered ranks, estimates the gradient of the expected return
from the noise weighted by those ranks, adds weight decay, and takes one Adam step. The policy acts
deterministically in these episodes by default: the perturbations alone explore.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from maze_lab.core.log_stats.writers import LogStatsWriter
from maze_lab.core.utils.log import get_logger
from maze_lab.train.ray_config import RayWorkerSettings
from maze_lab.train.trainers.common.actor_critic import _to_numpy, _to_plain
from maze_lab.train.trainers.common.base import Trainer
from maze_lab.train.trainers.common.model_selection import BestModelSelection
from maze_lab.train.trainers.common.ray_workers import RayWorkersMixin
from maze_lab.train.trainers.common.worker_stats import WorkerEpisodeStats
from maze_lab.train.trainers.es.config import ESAlgorithmConfig
from maze_lab.train.trainers.es.events import ESEvents
from maze_lab.train.trainers.es.noise_table import NoiseTable, check_fits
from maze_lab.train.trainers.es.workers import ESWorkers, PairResult, PairTask, set_flat_parameters

_log = get_logger(__name__)

__all__ = ["ES", "ESAlgorithmConfig", "centered_ranks", "es_gradient"]


def centered_ranks(returns: np.ndarray) -> np.ndarray:
    """The returns replaced by their ranks scaled to [-0.5, 0.5] (same shape).

    Ranks make the update blind to the scale of the rewards and to outliers. Equal returns share their mean rank:
    two episodes that scored the same then pull the parameters neither way (CartPole's many episodes that all reach
    the time limit would otherwise get ranks decided by their order alone: a random walk).
    """
    values = np.asarray(returns, dtype=np.float64)
    flat = values.reshape(-1)
    n = flat.size
    if n < 2:
        return np.zeros_like(values)
    order = np.argsort(flat, kind="stable")
    ranks = np.empty(n, dtype=np.float64)
    _, first, counts = np.unique(flat[order], return_index=True, return_counts=True)
    for start, count in zip(first, counts, strict=True):
        ranks[order[start:start + count]] = start + (count - 1) / 2.0
    return (ranks / (n - 1) - 0.5).reshape(values.shape)


def es_gradient(weights: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The ES estimate of the gradient of the expected return, from antithetic pairs.

    ``sum_i (w_i+ - w_i-) * eps_i / (2 n)`` for n pairs with rank weights ``w`` (shape (n, 2): +eps, -eps) and noise
    ``eps`` (shape (n, dim)). The factor 1 / sigma of the estimator is left out, as in the original implementation:
    Adam's step does not depend on the gradient's scale, and ``l2_penalty`` keeps the meaning it has there.
    """
    weights = np.asarray(weights, dtype=np.float64)
    difference = weights[:, 0] - weights[:, 1]
    return difference @ np.asarray(noise, dtype=np.float64) / weights.size


class ES(RayWorkersMixin, Trainer):
    """OpenAI-style evolution strategies with worker processes on this machine, or Ray actors (``workers="ray"``).

    :param algorithm_config: the algorithm parameters.
    :param model: a TorchPolicy, or a TorchActorCritic whose policy is trained (its critic is not used).
    :param env_factories: one env factory per worker process (picklable with cloudpickle; a LogStatsWrapper is
        added where the env has none). Workers start with the first :meth:`train`.
    :param evaluator: run after each epoch on the unperturbed policy; it keeps the best weights.
    :param model_selection: keeps the best weights (default: the evaluator's, else a new one).
    :param writers: writers of the trainer statistics and the training episodes' statistics (default: the
        process-wide writers).
    :param checkpoint_dir: where ``state_dict_last.pt`` and ``state_dict_best.pt`` are written; None for no files.
    :param start_method: multiprocessing start method of the workers (``spawn`` is safe in kernels with threads).
    :param workers: ``"processes"`` (worker processes on this machine) or ``"ray"`` (Ray actors, see
        :mod:`maze_lab.train.trainers.es.ray_workers`; same weights as the processes for the same seed and number of
        workers).
    :param ray: with ``workers="ray"``: where Ray runs (``address``: None for a local Ray or the one already
        initialized, ``"auto"``, ``"host:6379"``, ``"ray://host:10001"`` for a cluster), the CPUs and GPUs each actor
        reserves and ``max_worker_restarts`` (default: a local Ray, 1 CPU per actor, no restarts).
    """

    events = ESEvents
    uses_env_factories = True
    """The run layer hands this trainer env factories (it runs its envs in its own processes)."""
    one_env_per_ray_worker = True
    """With ``runner=ray``: ``runner.n_workers`` actors of one env each (pair tasks go to whichever is free)."""

    def __init__(self, algorithm_config: ESAlgorithmConfig, model: Any, env_factories: Sequence[Any],
                 evaluator: Any = None, model_selection: BestModelSelection | None = None,
                 writers: list[LogStatsWriter] | None = None, checkpoint_dir: str | Path | None = None,
                 start_method: str = "spawn", workers: str = "processes", ray: RayWorkerSettings | None = None):
        self._init_workers_backend(workers, ray)
        if not env_factories:
            raise ValueError("ES needs env_factories: one env factory per worker process, e.g. [make_env] * 2")
        self.env_factories = list(env_factories)
        self.start_method = start_method
        self.env = WorkerEpisodeStats("train", writers)
        super().__init__(algorithm_config, model, evaluator, model_selection, writers, checkpoint_dir)
        cfg = self.config
        self.policy = getattr(model, "policy", model)
        self._params = list(self.policy.parameters())
        if not self._params:
            raise ValueError(f"ES trains the policy's parameters; this {type(self.policy).__name__} has none")
        self.n_params = sum(p.numel() for p in self._params)
        check_fits(self.n_params, int(cfg.shared_noise_table_size))
        self.flat = torch.nn.Parameter(self._read_parameters())
        self.optimizer = torch.optim.Adam([self.flat], lr=cfg.step_size, betas=(0.9, 0.999), eps=1e-8)
        self.noise_table_seed = int(cfg.seed) if cfg.seed is not None else secrets.randbelow(2 ** 31)
        self.noise_table: NoiseTable | None = None
        self.workers: Any = None
        """ESWorkers (local processes) or ESRayWorkers (Ray actors), from the first train() on."""
        self._no_signal_warned = False
        self._normalization_statistics: Any = None
        """The training envs' observation normalization statistics (checkpoint form), as last read or loaded."""

    # ---- workers ---------------------------------------------------------------------------------------------
    def _before_training(self, has_target: bool) -> None:
        cfg = self.config
        if self.noise_table is None or self.noise_table.seed != self.noise_table_seed:
            self.noise_table = NoiseTable(self.noise_table_seed, cfg.shared_noise_table_size)
        if self.workers is None and self.worker_backend == "ray":
            from maze_lab.train.trainers.es.ray_workers import ESRayWorkers

            self._connect_ray()
            self.workers = ESRayWorkers(self.env_factories, self.policy, self.noise_table_seed,
                                        cfg.shared_noise_table_size, cfg.noise_stddev, cfg.max_steps,
                                        cfg.deterministic_rollouts,
                                        _to_numpy(self._normalization_statistics) if self._normalization_statistics
                                        else None, self.ray_settings, owns_ray=self._owns_ray,
                                        on_restart=self._worker_replaced)
        elif self.workers is None:
            self.workers = ESWorkers(self.env_factories, self.policy, self.noise_table_seed,
                                     cfg.shared_noise_table_size, cfg.noise_stddev, cfg.max_steps,
                                     cfg.deterministic_rollouts, self.start_method,
                                     _to_numpy(self._normalization_statistics) if self._normalization_statistics
                                     else None)

    def close(self) -> None:
        """Stop the workers (they flush their env's event logs first) and shut down a Ray this trainer started;
        idempotent."""
        self._stop_workers()
        self._shutdown_ray()

    def _stop_workers(self) -> None:
        """Stop the workers (the next train() starts fresh ones); Ray, where used, keeps running."""
        workers, self.workers = self.workers, None
        if workers is not None:
            workers.close()

    # ---- the epoch ---------------------------------------------------------------------------------------------
    def _epoch_updates(self) -> Iterator[None]:
        for _ in range(self.config.epoch_length):
            yield
            self._one_update()

    def _one_update(self) -> None:
        cfg = self.config
        t0 = time.perf_counter()
        self._new_update()

        # 1. theta: the model's weights as they are now (a checkpoint may have been loaded into the model)
        theta = self._read_parameters()
        if not torch.isfinite(theta).all():
            raise self._diverged_weights_error("the ES update")
        with torch.no_grad():
            self.flat.copy_(theta)
        theta_np = theta.detach().cpu().numpy()

        # 2. perturbations and their antithetic pairs of episodes, played by the workers
        offsets, results = self._play_pairs(theta_np)
        t1 = time.perf_counter()
        returns = np.array([r.returns for r in results], dtype=np.float64)
        lengths = np.array([r.lengths for r in results], dtype=np.int64)
        for r in results:
            self.env.add(r.episodes)
        self.env_steps += int(lengths.sum())
        self._check_finite({"perturbed returns": torch.as_tensor(returns)})

        # 3. centered ranks of all returns, 4. the gradient estimate from the noise they weight
        weights = centered_ranks(returns)
        noise = np.stack([self.noise_table.get(int(o), self.n_params) for o in offsets])
        gradient = torch.as_tensor(es_gradient(weights, noise), dtype=self.flat.dtype, device=self.flat.device)

        # 5. Adam minimises: it gets the negated ascent direction plus the weight decay's pull towards zero
        self.flat.grad = -gradient + cfg.l2_penalty * self.flat.detach()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        update = self.flat.detach() - theta
        self._check_finite({"es_update": update})
        set_flat_parameters(self._params, self.flat.detach())
        self.updates += 1

        theta_norm = float(torch.linalg.vector_norm(theta))
        update_norm = float(torch.linalg.vector_norm(update))
        self._record(ESEvents.perturbed_return_mean, returns.mean())
        self._record(ESEvents.worker_restarts, self._take_restarts())
        self._record(ESEvents.perturbed_return_max, returns.max())
        self._record(ESEvents.perturbed_return_min, returns.min())
        self._record(ESEvents.perturbed_return_std, returns.std())
        self._record(ESEvents.tied_pairs, float(np.mean(returns[:, 0] == returns[:, 1])))
        self._warn_if_no_signal(returns)
        self._record(ESEvents.gradient_norm, float(np.linalg.norm(gradient.cpu().numpy())))
        self._record(ESEvents.update_norm, update_norm)
        self._record(ESEvents.update_ratio, update_norm / theta_norm if theta_norm > 0 else 0.0)
        self._record(ESEvents.weight_norm, float(torch.linalg.vector_norm(self.flat.detach())))
        self._record(ESEvents.n_episodes, returns.size)
        self._record(ESEvents.n_env_steps, int(lengths.sum()))
        self._record(ESEvents.step_size, cfg.step_size)
        self._record(ESEvents.time_rollouts, t1 - t0)
        self._record(ESEvents.time_update, time.perf_counter() - t0)

    def _warn_if_no_signal(self, returns: np.ndarray) -> None:
        """Say once per run where every perturbed policy got the same return: ranks are then all equal and the
        update has no direction, which is how ES stalls on sparse rewards (a task random policies never finish)."""
        if self._no_signal_warned or not np.all(returns == returns.flat[0]):
            return
        self._no_signal_warned = True
        message = (f"ES update {self.updates}: all {returns.size} perturbed episodes returned "
                   f"{returns.flat[0]:.4g}, so the update had no direction to follow (ESEvents/tied_pairs shows it "
                   f"per epoch). ES learns from differences between perturbed policies: on sparse rewards give it a "
                   f"larger algorithm.noise_stddev, longer episodes (algorithm.max_steps) or a shaped reward, or use "
                   f"PPO or IMPALA")
        self.warnings.append(message)
        _log.warning(message)

    def _play_pairs(self, theta: np.ndarray) -> tuple[list[int], list[PairResult]]:
        """Antithetic pairs until the update has ``n_rollouts_per_update`` episodes and ``n_timesteps_per_update``
        agent actions; returns the noise offsets and the workers' results, in task order.

        The pairs are played in rounds whose size depends only on the config, the number of workers and the
        results so far; the offsets and env seeds of update k come from a generator seeded with (seed, k). So the
        same seed and number of workers give the same update, however the workers are scheduled, and a resumed
        run draws what the uninterrupted one would have drawn.
        """
        cfg = self.config
        rng = np.random.Generator(np.random.PCG64([self.noise_table_seed, self.updates]))
        offsets: list[int] = []
        results: list[PairResult] = []
        episodes = steps = 0
        while episodes < cfg.n_rollouts_per_update or steps < cfg.n_timesteps_per_update:
            missing_pairs = -(-(cfg.n_rollouts_per_update - episodes) // 2)
            if steps < cfg.n_timesteps_per_update and results:
                # the pairs the missing agent actions need at the pair length seen so far in this update
                missing_pairs = max(missing_pairs, int(np.ceil((cfg.n_timesteps_per_update - steps)
                                                               / (steps / len(results)))))
            n_pairs = max(missing_pairs, len(self.workers))  # at least one pair per worker: none idles
            new_offsets = self.noise_table.sample_offsets(rng, self.n_params, n_pairs)
            env_seeds = rng.integers(0, 2 ** 31 - 1, size=n_pairs)
            tasks = [PairTask(len(offsets) + i, int(o), int(s))
                     for i, (o, s) in enumerate(zip(new_offsets, env_seeds, strict=True))]
            try:
                round_results = self.workers.evaluate(theta, tasks)
            except BaseException:
                self._stop_workers()  # the workers are shut down; the next train() starts fresh ones
                raise
            offsets += [t.offset for t in tasks]
            results += round_results
            episodes += 2 * len(round_results)
            steps += sum(sum(r.lengths) for r in round_results)
        return offsets, results

    def _read_parameters(self) -> torch.Tensor:
        """The policy's parameters as one flat tensor (a copy)."""
        return torch.cat([p.detach().reshape(-1) for p in self._params]).clone()

    # ---- checkpoints -----------------------------------------------------------------------------------------------
    def _extra_state(self) -> dict[str, Any]:
        """The noise table's seed, and the observation normalization statistics of the workers' envs (where they
        normalize): the run's policy acts on normalized observations, so its checkpoint carries them."""
        if self.workers is not None:
            stats = self.workers.normalization_statistics()
            if stats:
                self._normalization_statistics = _to_plain(stats)
        state: dict[str, Any] = {"noise_table_seed": self.noise_table_seed}
        if self._normalization_statistics:
            state["normalization_statistics"] = self._normalization_statistics
        return state

    def _load_extra_state(self, state: dict[str, Any], weights_only: bool) -> None:
        with torch.no_grad():
            self.flat.copy_(self._read_parameters())
        if state.get("normalization_statistics"):
            # the workers' envs start with the checkpoint's statistics instead of estimating their own
            self._normalization_statistics = state["normalization_statistics"]
            self._stop_workers()
        if not weights_only and state.get("noise_table_seed") is not None:
            seed = int(state["noise_table_seed"])
            if seed != self.noise_table_seed:
                self.noise_table_seed = seed
                self._stop_workers()  # workers hold a table of the old seed: fresh ones start with the next train()
