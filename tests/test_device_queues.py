"""Every process pkb starts on a GPU makes its CUDA context with one hardware work queue
(pkb_core.machine.device.GPU_ENVIRONMENT), except the timekeeper, whose device engine needs a
second (TIMEKEEPER_GPU_ENVIRONMENT). What the GPU does with them is measured on two GPUs
(docs/benchmarks/2026-11-30-h200x2-device-queues.md; tests/test_window_clock_gpu.py); these
check that each process is started with its setting."""
import types

import torch

from pkb_core.judge.clock import Timekeeper
from pkb_core.launch.launcher import Launch
from pkb_core.machine.device import GPU_ENVIRONMENT, TIMEKEEPER_GPU_ENVIRONMENT, device_environment

NAME = "CUDA_DEVICE_MAX_CONNECTIONS"


def _launch_environment(device: str, role: str) -> dict:
    """What :meth:`Launch.environment` gives a node's processes of ``role`` in ``device``'s mode."""
    settings = types.SimpleNamespace(device=device, environment=(), preload=())
    return Launch.environment(types.SimpleNamespace(settings=settings), role)


def test_every_group_on_a_gpu_gets_one_queue_unless_the_caller_says(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    assert GPU_ENVIRONMENT[NAME] == "1"
    for role in ("judge", "candidate"):  # the reference's groups are started as a candidate's
        assert _launch_environment("cuda", role)[NAME] == "1"
        assert NAME not in _launch_environment("cpu", role)
    assert device_environment("cuda") == GPU_ENVIRONMENT
    # a caller's own value (a diagnostic: docs/timing.md) is every group's alike
    monkeypatch.setenv(NAME, "8")
    assert device_environment("cuda") == {}
    assert {_launch_environment("cuda", role)[NAME] for role in ("judge", "candidate")} == {"8"}


def test_the_timekeeper_keeps_a_second_queue_whatever_the_caller_says(tmp_path, monkeypatch):
    monkeypatch.setenv(NAME, "1")
    keeper = Timekeeper(torch.device("cpu"), str(tmp_path), 0, "host")
    try:
        keeper.region("candidate", 64, 64, None)  # an answer: the process is up (an exec's is read empty)
        with open(f"/proc/{keeper.proc.pid}/environ", "rb") as f:
            environ = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    finally:
        keeper.close()
    assert environ.get(NAME.encode()) == TIMEKEEPER_GPU_ENVIRONMENT[NAME].encode() == b"8"
