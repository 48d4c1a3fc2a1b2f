"""The compile phase: every solution built in parallel before any job, outcomes cached by content."""
import json

import pytest

BACKEND = '''
import os, time
from pkb_core.plugin.backend import BackendInfo
from pkb_core.errors import CompileError
from pkb_core.plugin.hookspecs import hookimpl
from pkb_core.candidate.solution import load_solution

# Opened when the plugin is imported, before any lockdown: builders and candidates write nothing
# outside their own folders afterwards (docs/trust.md), but a descriptor they hold keeps working.
_LOG = open(os.environ["PKBTEST_BUILDS"], "a", buffering=1)

def log(**entry):
    _LOG.write(__import__("json").dumps(entry) + "\\n")

@hookimpl
def pkb_backend_info():
    return BackendInfo(name="slowbuild", devices=("cpu",), custom_kernels=True, environment=("PKBTEST_BUILDS",))

@hookimpl
def pkb_backend_compile(state, problem, solution):
    source = open(solution).read()
    started = time.time()
    if getattr(state, "ahead_of_time", False):
        if "BUILD_HANGS" in source:
            time.sleep(1000)
        time.sleep(5 if "SLOW_BUILD" in source else 2)  # what nvcc would take
        if "BUILD_FAILS" in source:
            raise CompileError("nvcc: error: expected a ';'")
    log(file=os.path.basename(solution), ahead=getattr(state, "ahead_of_time", False), pid=os.getpid(),
        start=started, end=time.time(), max_jobs=os.environ.get("MAX_JOBS"))
    return load_solution(solution)
'''

HONEST = '''"""Honest ({tag})."""
import torch
from pkb_core.symmetric import handle_of

def solution(tensor):
    handle = handle_of(tensor)
    handle.barrier()
    out = torch.zeros_like(tensor)
    for peer in range(handle.world_size):
        out += handle.get_buffer(peer, tuple(tensor.shape), tensor.dtype)
    handle.barrier()
    return out
'''


@pytest.fixture
def slowbuild(fake_dist, tmp_path, monkeypatch):
    fake_dist("pkbtest-slowbuild", {"pkb.backends": {"slowbuild": "pkbtest_slowbuild"}},
              {"pkbtest_slowbuild": BACKEND})
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PKBTEST_BUILDS", str(tmp_path / "builds.jsonl"))
    folder = tmp_path / "solutions"
    folder.mkdir()
    for tag in ("a", "b", "c"):
        (folder / f"1_allreduce_{tag}.py").write_text(HONEST.format(tag=tag))
    (folder / "1_allreduce_slow.py").write_text(HONEST.format(tag="SLOW_BUILD"))
    (folder / "1_allreduce_fails.py").write_text(HONEST.format(tag="BUILD_FAILS"))
    return folder


def _run(pkb_invoke, folder, out, build_timeout=120):
    # Limits far above what a loaded 2-core machine needs: what the tests show is the order of
    # builds and jobs (the log's timestamps), which no load changes.
    result = pkb_invoke("run", "--backend", "slowbuild", "--solutions", folder, "--problem", "1", "--trials", "1",
                        "--build-jobs", "6", "--build-timeout", build_timeout, "--timeout", "60", "--out", out,
                        "--json")
    return {r["solution"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)["results"]}


def _processes_with(setting: str) -> list[int]:
    """Pids of live processes whose environment holds ``setting`` (this test's, not another's)."""
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if setting.encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _log(tmp_path):
    return [json.loads(line) for line in (tmp_path / "builds.jsonl").read_text().splitlines()]


def test_builds_run_in_parallel_before_any_job_and_outside_its_timeout(pkb_invoke, slowbuild, tmp_path):
    records = _run(pkb_invoke, slowbuild, tmp_path / "run1")
    for name in ("1_allreduce_a.py", "1_allreduce_b.py", "1_allreduce_c.py", "1_allreduce_slow.py"):
        assert records[name]["verdict"] == "pass", records[name]["reason"]
        assert records[name]["compile"]["cached"] is False
    # Compile time is not the job's: every build ended before the first job began.
    assert records["1_allreduce_slow.py"]["compile"]["seconds"] >= 5
    assert records["1_allreduce_fails.py"]["verdict"] == "compile-error"
    assert records["1_allreduce_fails.py"]["reason"] == "nvcc: error: expected a ';'"
    log = _log(tmp_path)
    ahead = [e for e in log if e["ahead"]]
    in_jobs = [e for e in log if not e["ahead"]]
    assert len({e["pid"] for e in ahead}) == len(ahead) == 4  # one builder process each (not the failed one)
    assert any(a["start"] < b["end"] and b["start"] < a["end"] for a in ahead for b in ahead if a is not b)
    assert max(e["end"] for e in ahead) <= min(e["start"] for e in in_jobs)  # all before the first job


def test_outcomes_are_cached_by_content_failures_too(pkb_invoke, slowbuild, tmp_path):
    _run(pkb_invoke, slowbuild, tmp_path / "run1")
    first = len([e for e in _log(tmp_path) if e["ahead"]])
    records = _run(pkb_invoke, slowbuild, tmp_path / "run2")
    assert len([e for e in _log(tmp_path) if e["ahead"]]) == first  # nothing rebuilt
    assert records["1_allreduce_a.py"]["compile"]["cached"] is True and records["1_allreduce_a.py"]["verdict"] == "pass"
    assert records["1_allreduce_fails.py"]["verdict"] == "compile-error"
    assert records["1_allreduce_fails.py"]["compile"]["cached"] is True
    # New content, new build.
    (slowbuild / "1_allreduce_a.py").write_text(HONEST.format(tag="a, edited"))
    records = _run(pkb_invoke, slowbuild, tmp_path / "run3")
    assert records["1_allreduce_a.py"]["compile"]["cached"] is False


def test_pkb_build_warms_the_cache_alone(pkb_invoke, slowbuild, tmp_path):
    result = pkb_invoke("build", "--backend", "slowbuild", "--solutions", slowbuild, "--problem", "1",
                        "--build-jobs", "6", "--build-timeout", "120", "--json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    builds = {b["build"]["solution"].rsplit("/", 1)[-1]: b["build"] for b in lines[:-1]}
    phase = lines[-1]["summary"].pop("phase")
    assert lines[-1] == {"summary": {"built": 4, "compile_error": 1, "unsupported": 0}}
    # Throughput: 5 builds made (the failure too) by 5 builders at once (each builder's own
    # timestamps overlap), over the phase's wall time.
    assert phase["built"] == 5 and phase["failed"] == 1 and phase["cached"] == 0 and phase["workers"] == 5
    # (wall_s is rounded to 0.1 s: the rate lies between those of its ends, itself rounded to 1)
    wall = phase["wall_s"]
    assert wall >= 5 and 5 * 3600 / (wall + 0.05) - 1 <= phase["builds_per_hour"] <= 5 * 3600 / (wall - 0.05) + 1
    ahead = [e for e in _log(tmp_path) if e["ahead"]]
    assert any(a["start"] < b["end"] and b["start"] < a["end"] for a in ahead for b in ahead if a is not b)
    # Each builder's ninja runs its two compiles at once.
    assert {entry["max_jobs"] for entry in _log(tmp_path) if entry["ahead"]} == {"2"}
    assert result.exit_code == 1  # some did not build
    assert builds["1_allreduce_b.py"]["ok"] and not builds["1_allreduce_fails.py"]["ok"]
    records = _run(pkb_invoke, slowbuild, tmp_path / "run")
    assert records["1_allreduce_b.py"]["compile"]["cached"] is True


def test_pkb_build_json_cut_by_a_signal_has_printed_what_finished(slowbuild, tmp_path):
    # `timeout 60 pkb build --json` on a tree with a hanging build: the outcomes that finished
    # before the signal are on stdout, one JSON line each, as they finished.
    import os
    import signal
    import subprocess
    import sys
    import time

    (slowbuild / "1_allreduce_hangs.py").write_text(HONEST.format(tag="BUILD_HANGS"))
    proc = subprocess.Popen([sys.executable, "-m", "pkb_core", "build", "--backend", "slowbuild", "--solutions",
                             str(slowbuild), "--problem", "1", "--build-jobs", "6", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=os.environ.copy())
    lines = []
    deadline = time.monotonic() + 120
    while len(lines) < 5 and time.monotonic() < deadline:
        lines.append(json.loads(proc.stdout.readline()))  # one complete line per finished build
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    proc.wait(timeout=30)
    names = sorted(line["build"]["solution"].rsplit("/", 1)[-1] for line in lines)
    assert names == sorted(p.name for p in slowbuild.iterdir() if "hangs" not in p.name)
    assert "hangs" not in rest and "summary" not in rest
    assert proc.returncode == 128 + signal.SIGTERM
    time.sleep(1)
    assert not _processes_with(f"PKBTEST_BUILDS={tmp_path / 'builds.jsonl'}"), "the hanging builder outlived pkb build"


def test_a_build_that_hangs_has_its_own_limit_and_is_not_cached(pkb_invoke, slowbuild, tmp_path):
    for path in slowbuild.iterdir():
        path.unlink()
    (slowbuild / "1_allreduce_hangs.py").write_text(HONEST.format(tag="BUILD_HANGS"))
    for run in ("run1", "run2"):
        records = _run(pkb_invoke, slowbuild, tmp_path / run, build_timeout=10)
        record = records["1_allreduce_hangs.py"]
        assert record["verdict"] == "compile-error"
        assert "did not finish within 10 s (--build-timeout)" in record["reason"]
        # It may have been the machine's fault: tried again, never from the cache.
        assert record["compile"]["cached"] is False


CLAIMS_UNSUPPORTED = '''"""Claims, from inside the builder, that it needs what pkb cannot provide."""
import json, os, sys

os.write(int(os.environ["PKB_REPLY_FD"]), (json.dumps(
    {"ok": False, "verdict": "unsupported", "message": "needs hardware this machine lacks"}) + "\\n").encode())
os._exit(0)


def solution(tensor):
    return tensor + 1
'''


def test_a_builder_that_claims_unsupported_after_the_source_check_gets_compile_error(pkb_invoke, slowbuild,
                                                                                     tmp_path):
    # `unsupported` does not fail a run: only the source check, before any solution code runs, may say it.
    for path in slowbuild.iterdir():
        path.unlink()
    (slowbuild / "1_allreduce_claims.py").write_text(CLAIMS_UNSUPPORTED)
    record = _run(pkb_invoke, slowbuild, tmp_path / "run")["1_allreduce_claims.py"]
    assert record["verdict"] == "compile-error", record
    assert record["reason"].endswith("(reported once its code was imported: a compile error, not unsupported)")


FLOODS_ITS_REPLY = '''"""Writes into its reply pipe from its import, without end."""
import os

chunk = b"x" * (1 << 20)
while True:
    os.write(int(os.environ["PKB_REPLY_FD"]), chunk)


def solution(tensor):
    return tensor
'''


def test_a_build_that_floods_its_reply_pipe_ends_at_once_with_its_builder(pkb_invoke, slowbuild, tmp_path):
    """A writer that kept the pipe full held the phase's read loop, and with it the time limit and
    a cancel, for as long as it wrote (a hostile review, 2026-12-02: a build 997 s past a 600 s
    limit, 1.5 GB in the launcher; one that writes forever never ended)."""
    import time

    for path in slowbuild.iterdir():
        path.unlink()
    (slowbuild / "1_allreduce_floods.py").write_text(FLOODS_ITS_REPLY)
    started = time.monotonic()
    record = _run(pkb_invoke, slowbuild, tmp_path / "run", build_timeout=300)["1_allreduce_floods.py"]
    assert time.monotonic() - started < 120
    assert record["verdict"] == "compile-error", record
    assert "wrote more than 1 MiB to its reply pipe" in record["reason"], record
    assert not _processes_with(f"PKBTEST_BUILDS={tmp_path / 'builds.jsonl'}")


def test_outcomes_are_keyed_by_the_code_that_decides_them(fake_dist, tmp_path):
    """A cached compile-error came back after the triton backend learned to serve a module (the
    version number had not moved): the outcome's key holds a fingerprint of pkb's and its
    plugins' files, so editing a backend invalidates it; a backend of one module counts that
    file alone, not every file beside it."""
    from pkb_core.compile import outcomes

    site = fake_dist("pkbtest-fingerprint", {"pkb.backends": {"fingerprinted": "pkbtest_fingerprinted"}},
                     {"pkbtest_fingerprinted": "SERVES = {}\n"})
    solution = tmp_path / "1_allreduce.py"
    solution.write_text("def solution(x):\n    return x\n")
    outcomes.code_fingerprint.cache_clear()
    before = outcomes.outcome_key("fingerprinted", solution, "cpu")
    (site / "unrelated_neighbour.py").write_text("X = 1\n")
    outcomes.code_fingerprint.cache_clear()
    assert outcomes.outcome_key("fingerprinted", solution, "cpu") == before
    (site / "pkbtest_fingerprinted.py").write_text("SERVES = {'utils.cuda_helpers': 'somewhere'}\n")
    outcomes.code_fingerprint.cache_clear()
    assert outcomes.outcome_key("fingerprinted", solution, "cpu") != before
    outcomes.code_fingerprint.cache_clear()


def test_outcomes_stored_at_once_by_threads_of_one_process_all_land(tmp_path):
    """The service builds in threads of one process, and two jobs of the same content store the
    same outcome at once: every store lands whole (they shared one temporary file, named by the
    process alone, and one's rename found it gone: that job's build became an `error`)."""
    import threading

    from pkb_core.compile.outcomes import store_outcome
    from pkb_core.contracts.build import BuildResult

    path = tmp_path / "builds" / "key.json"
    failures = []

    def store(i):
        try:
            for _ in range(100):
                store_outcome(path, f"solution-{i}.py", "reference", BuildResult(True, "", 0.1))
        except Exception as exc:  # noqa: BLE001 - what the test reports
            failures.append(repr(exc))

    threads = [threading.Thread(target=store, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures[:3]
    assert json.loads(path.read_text())["ok"] is True
    assert [p.name for p in path.parent.iterdir()] == ["key.json"]  # no temporary file left


def test_a_file_that_is_no_solution_file_is_refused_before_any_builder(pkb_invoke, tmp_path):
    """An empty file and one that is not UTF-8 get ``compile-error`` from the compile phase itself,
    in one line (a builder that decoded the binary file died with a traceback in its log, and the
    job read "the build process exited with status 1 without an answer")."""
    folder = tmp_path / "solutions"
    folder.mkdir()
    (folder / "1_allreduce_binary.py").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe\x00")
    (folder / "1_allreduce_empty.py").write_text("\n  \n")
    result = pkb_invoke("run", "--backend", "reference", "--solutions", folder, "--problem", "1", "--json",
                        "--out", tmp_path / "run")
    records = {r["solution"].rsplit("/", 1)[-1]: r for r in json.loads(result.stdout)["results"]}
    assert records["1_allreduce_binary.py"]["verdict"] == "compile-error"
    assert records["1_allreduce_binary.py"]["reason"] == ("the file is not UTF-8 text (invalid start byte at byte "
                                                          "10); a solution file is UTF-8 Python")
    assert records["1_allreduce_empty.py"]["verdict"] == "compile-error"
    assert records["1_allreduce_empty.py"]["reason"].startswith("the source is empty")
