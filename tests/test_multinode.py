"""One job spanning two 'nodes': two pkb launchers on 127.0.0.1 forming one gloo world."""
import json
import os
import socket
import subprocess
import sys


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_launchers_form_one_world(tmp_path):
    port = _free_port()
    env = dict(os.environ, PKB_DEVICE="cpu")

    def launcher(node_rank):
        return subprocess.Popen(
            [sys.executable, "-m", "pkb_core", "run", "--problem", "1,8", "--nproc", "1", "--nnodes", "2",
             "--node-rank", str(node_rank), "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "pkbtest",
             "--trials", "2", "--out", str(tmp_path / f"node{node_rank}"), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    nodes = [launcher(0), launcher(1)]
    outputs = [node.communicate(timeout=240) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], [err[-2000:] for _, err in outputs]
    records = [r for out, _ in outputs for r in json.loads(out)["results"]]
    # Exactly one node (the one holding global rank 0) wrote the records.
    assert sorted((r["problem"], r["world_size"], r["verdict"]) for r in records) == [
        ("1_allreduce", 2, "pass"), ("8_alltoall", 2, "pass")]


def test_multinode_needs_an_endpoint(pkb_invoke, tmp_path):
    result = pkb_invoke("run", "--nnodes", "2", "--out", tmp_path)
    assert result.exit_code == 1
    assert result.output.strip().endswith("Error: --nnodes > 1 needs --rdzv-endpoint host:port (the same on every node)")
