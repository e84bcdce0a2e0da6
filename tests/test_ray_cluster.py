"""runner=ray on a Ray cluster given by address: a real two-node cluster (two raylets of one CPU each, started on this
machine with Ray's own cluster utility, as `ray start --head` and `ray start --address=…` would on two machines),
joined by its GCS address from a fresh driver process and through Ray Client (``ray://``)."""

from __future__ import annotations

import json
import socket
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def two_node_cluster():
    from ray.cluster_utils import Cluster

    client_port = _free_port()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "ray_client_server_port": client_port})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster.address, f"ray://127.0.0.1:{client_port}"
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
    address, _ = two_node_cluster
    result = _drive("ppo", address, tmp_path)
    assert len(result["nodes"]) == 2
    assert result["placed"] == result["nodes"]  # one worker per node
    assert result["epoch"] == 2 and result["env_steps"] == 2 * 2 * 32 * 4
    assert _status(result["run_dir"]) == "done"
    assert [p.name for p in Path(result["run_dir"]).rglob("state_dict_last.pt")] == ["state_dict_last.pt"]


def test_impala_on_a_cluster_through_ray_client(two_node_cluster, tmp_path: Path) -> None:
    """runner.address=ray://…: IMPALA's Ray workers run on the cluster, the driver only talks to it through Ray
    Client; the run ends done."""
    _, client = two_node_cluster
    result = _drive("impala", client, tmp_path)
    assert result["epoch"] == 2 and result["env_steps"] == 2 * 2 * 4 * 32
    assert _status(result["run_dir"]) == "done"
