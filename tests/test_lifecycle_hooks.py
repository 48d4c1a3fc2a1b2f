"""Each lifecycle hook, seen from a throwaway backend that logs its calls in every rank."""
import json

BACKEND = '''
import os
import torch
from pkb_core.plugin.backend import BackendInfo
from pkb_core.errors import BackendUnavailable
from pkb_core.plugin.hookspecs import hookimpl
from pkb_core.symmetric.shm import SharedMemoryHeap

# Opened when the plugin is imported, before the lockdown: a candidate writes nothing outside its
# own folders afterwards (docs/trust.md), but a descriptor it holds keeps working.
_LOG = open(os.environ["PKBTEST_LOG"], "a", buffering=1) if "PKBTEST_LOG" in os.environ else None

def log(text):
    _LOG.write(text + "\\n")

@hookimpl
def pkb_backend_info():
    return BackendInfo(name="logger", devices=("cpu",), custom_kernels=False, environment=("PKBTEST_*",))

@hookimpl
def pkb_backend_init(ctx):
    log(f"init {ctx.rank}")
    if os.environ.get("PKBTEST_UNAVAILABLE"):
        raise BackendUnavailable("libfoo runtime did not start")
    ctx.heap = SharedMemoryHeap(ctx.rank, ctx.world_size, ctx.barrier, ctx.run_id + "-logger")
    return ctx

@hookimpl
def pkb_backend_allocate(state, shape, dtype):
    log(f"allocate {state.rank} {tuple(shape)}")
    return state.heap.empty(shape, dtype)

@hookimpl
def pkb_backend_finalize(state):
    log(f"finalize {getattr(state, 'rank', None)}")
'''


def _run(pkb_invoke, fake_dist, tmp_path, monkeypatch, *args):
    fake_dist("pkbtest-logger", {"pkb.backends": {"logger": "pkbtest_logger"}}, {"pkbtest_logger": BACKEND})
    log = tmp_path / "hooks.log"
    monkeypatch.setenv("PKBTEST_LOG", str(log))
    result = pkb_invoke("run", "--backend", "logger", "--out", tmp_path / "run", "--json", *args)
    return json.loads(result.stdout)["results"], sorted(log.read_text().splitlines())


def test_pkb_backend_init_allocate_finalize_order(pkb_invoke, fake_dist, tmp_path, monkeypatch):
    records, calls = _run(pkb_invoke, fake_dist, tmp_path, monkeypatch, "--problem", "1,7", "--trials", "3")
    assert [r["verdict"] for r in records] == ["pass", "pass"]
    # Fresh candidate processes per job: init and finalize once per rank and
    # job; one symmetric slot per job (allocated once, reused by later trials,
    # since sizes do not grow).
    assert calls.count("init 0") == 2 and calls.count("init 1") == 2
    assert calls.count("finalize 0") == 2 and calls.count("finalize 1") == 2
    allocations = sorted(c for c in calls if c.startswith("allocate 0"))
    # Every candidate process (the jobs' and the spare one) pays its heap's first
    # rendezvous before its job with one 64-byte buffer.
    first_uses = allocations.count("allocate 0 (64,)")
    assert first_uses >= 2
    assert [c for c in allocations if c != "allocate 0 (64,)"] == ["allocate 0 (1024,)", "allocate 0 (512,)"]


def test_backend_unavailable_at_init_is_unsupported_and_still_finalizes(pkb_invoke, fake_dist, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("PKBTEST_UNAVAILABLE", "1")
    records, calls = _run(pkb_invoke, fake_dist, tmp_path, monkeypatch, "--problem", "1")
    assert records[0]["verdict"] == "unsupported"
    assert records[0]["reason"] == "libfoo runtime did not start"
    assert "finalize None" in calls
