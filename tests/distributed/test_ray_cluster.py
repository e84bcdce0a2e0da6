"""runner=ray on a Ray cluster given by address: a real two-node cluster (two raylets of one CPU each, started on this
machine with Ray's own cluster utility, as `ray start --head` and `ray start --address=…` would on two machines),
joined by its GCS address from a fresh driver process.

Ray Client (``ray://``) is not tested here: it trained IMPALA once by hand, but in a CI run the client server's
proxier failed to start its per-client server (a Ray-internal failure, ``psutil.ZombieProcess``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

DRIVER = """
import json, sys
import ray
from maze_lab.run.run_context import RunContext

algorithm, address, base = sys.argv[1], sys.argv[2], sys.argv[3]
overrides = {"runner.address": address, "runner.n_workers": 2, "runner.envs_per_worker": 2, "log_base_dir": base,
             "algorithm.n_rollout_steps": 32, "algorithm.epoch_length": 2, "seed": 3}
if algorithm == "impala":
    overrides.update({"algorithm.actors_batch_size": 4, "algorithm.eval_repeats": 1})
rc = RunContext(algorithm=algorithm, runner="ray", silent=True, overrides=overrides)
rc.train(n_epochs=2)
trainer = rc.trainer
actors = trainer.rollout_generator.env.actors if algorithm == "ppo" else []
placed = sorted(ray.get([a.node_id.remote() for a in actors]))
nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
rc.close()
print("RESULT " + json.dumps({"run_dir": str(rc.run_dir), "placed": placed, "nodes": nodes,
                              "epoch": trainer.epoch, "env_steps": trainer.env_steps}))
"""


@pytest.fixture(scope="module")
def two_node_cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


def _drive(algorithm: str, address: str, base: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", DRIVER, algorithm, address, str(base)], capture_output=True,
                          text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def _status(run_dir: str) -> str:
    return json.loads((Path(run_dir) / "maze_lab_run.json").read_text())["status"]


def test_ppo_workers_spread_over_the_nodes_of_a_cluster_joined_by_address(two_node_cluster, tmp_path: Path) -> None:
    """Two workers of one CPU each on a cluster of two one-CPU nodes: Ray places one on each node; the run is done
    with its statistics and checkpoints written by the driver."""
    result = _drive("ppo", two_node_cluster, tmp_path)
    assert len(result["nodes"]) == 2
    assert result["placed"] == result["nodes"]  # one worker per node
    assert result["epoch"] == 2 and result["env_steps"] == 2 * 2 * 32 * 4
    assert _status(result["run_dir"]) == "done"
    assert [p.name for p in Path(result["run_dir"]).rglob("state_dict_last.pt")] == ["state_dict_last.pt"]


def test_impala_on_a_cluster_joined_by_address(two_node_cluster, tmp_path: Path) -> None:
    """IMPALA's Ray workers (2 x 2 actors) run on the two-node cluster; the run ends done with its epochs."""
    result = _drive("impala", two_node_cluster, tmp_path)
    assert result["epoch"] == 2 and result["env_steps"] == 2 * 2 * 4 * 32
    assert _status(result["run_dir"]) == "done"
