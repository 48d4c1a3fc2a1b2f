"""Item 3 of issue 29: a job reaches no other process and no file that matters (docs/trust.md).

A ``--solutions`` batch of attackers, each followed by an honest all-reduce that must still pass
with its own verdict: signals through descriptor owners (SIGIO), planted bytecode for a sibling
solution, pkb's installation and the problem pack, a ``pkb.toml`` in the working directory, the
launch log through standard output, the judge's heap names, saved outputs, replayed input->output
pairs (tests/fixtures/sandbox/)."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_sealed import CUSTOM_BACKEND, _records  # noqa: F401 - the plainpy backend

FIXTURES = Path(__file__).parent / "fixtures" / "sandbox"
EXPECTED = {
    "1_allreduce_a_sigio_signals_everyone.py": ("fail", "elements differ"),
    "1_allreduce_b_honest.py": ("pass", ""),
    "1_allreduce_c_plants_everywhere.py": ("fail", "elements differ"),
    "1_allreduce_d_honest.py": ("pass", ""),
    "1_allreduce_e_reads_saved_outputs.py": ("fail", "elements differ"),
    "1_allreduce_f_records_pairs.py": ("pass", ""),
    "1_allreduce_g_replays_pairs.py": ("fail", "elements differ"),
    "1_allreduce_h_honest.py": ("pass", ""),
}
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a user of its own per candidate group needs root")


@pytest.fixture
def plainpy(fake_dist):
    fake_dist("pkbtest-plainpy", {"pkb.backends": {"plainpy": "pkbtest_plainpy"}}, {"pkbtest_plainpy": CUSTOM_BACKEND})


@ROOT_ONLY
def test_no_job_reaches_another_process_or_a_file_that_matters(pkb_invoke, plainpy, tmp_path):
    import pkb_core.results.junit as later
    import pkb_problems

    run = tmp_path / "run"
    planted = [Path(__import__("importlib.util").util.cache_from_source(str(p))) for p in (
        FIXTURES / "1_allreduce_d_honest.py", Path(later.__file__),
        Path(pkb_problems.__file__).parent / "collective" / "1_allreduce.py")]
    before = {p: p.read_bytes() if p.exists() else None for p in planted}
    # Latency mode: its record names the alignment of each side's batch (the judge's device barrier).
    result = pkb_invoke("run", "--backend", "plainpy", "--solutions", FIXTURES, "--problem", "1", "--trials", "2",
                        "--measure-perf", "--timing-mode", "latency", "--warmup", "2", "--iters", "10",
                        "--save-outputs", "--out", run, "--json", "--timeout", "60")
    by_file = _records(result)
    assert set(by_file) == set(EXPECTED)
    for name, (verdict, text) in EXPECTED.items():
        assert by_file[name]["verdict"] == verdict, (name, by_file[name]["reason"])
        assert text in by_file[name]["reason"], (name, by_file[name]["reason"])
        assert not by_file[name].get("lockdown_gaps"), (name, by_file[name]["lockdown_gaps"])
    # Nothing planted where pkb, the judge or a sibling solution would load it, nor a pkb.toml.
    assert {p: p.read_bytes() if p.exists() else None for p in planted} == before
    assert not (Path.cwd() / "pkb.toml").exists()
    # The attacker's standard output went to its own job's log, never the launch log.
    logs = {p.name: p.read_text(errors="replace") for p in (run / "logs").glob("*.log")}
    assert not any("SANDBOX-ATTACK-MARKER" in text for name, text in logs.items() if name.startswith("launch-"))
    marker = [text for name, text in logs.items() if name.startswith("job-") and "SANDBOX-ATTACK-MARKER" in text]
    assert marker and "wrote" not in marker[0].split("SANDBOX-ATTACK-MARKER", 1)[1].splitlines()[0]
    # The judge's heap names were not the attacker's to take: the honest job after it was timed with
    # the judge's device barrier.
    assert '"reference": "device barrier"' in json.dumps(by_file["1_allreduce_d_honest.py"])
    # The same trial of two jobs of the same problem drew different inputs (inputs keyed by the job).
    # (Read by pattern: with unbuffered output two ranks' lines in one log could interleave.)
    seen = [set(re.findall(r"SANDBOX-INPUT ([0-9a-f]{40})", text)) for name, text in logs.items()
            if "SANDBOX-INPUT" in text]
    assert len(seen) == 2 and not (seen[0] & seen[1])
    # Nothing the candidates' users left in /dev/shm outlived their jobs (the names the attacker planted).
    launch = [name for name in logs if name.startswith("launch-")][0][len("launch-"):-len(".log")]
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(("pkb-replay-", f"pkb-{launch}"))]


@ROOT_ONLY
def test_a_candidate_user_cannot_signal_root_through_a_descriptor_owner(tmp_path):
    """The second line under the seccomp rule: with F_SETOWN allowed (no filter), a candidate's own
    user still cannot have the kernel signal a root process (sigio_perm)."""
    got = []
    previous = signal.signal(signal.SIGUSR2, lambda *_: got.append(True))
    code = f"""
import fcntl, os, signal
from pkb_core.confine.sandbox import SANDBOX_UID_BASE, switch_user
assert switch_user(SANDBOX_UID_BASE + 12345) is None
r, w = os.pipe()
fcntl.fcntl(r, fcntl.F_SETOWN, {os.getpid()})
fcntl.fcntl(r, 10, signal.SIGUSR2)
fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
os.write(w, b"x")
try:
    os.kill({os.getpid()}, signal.SIGUSR2)
except PermissionError:
    print("kill refused")
"""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
        import time
        time.sleep(0.2)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert done.returncode == 0, done.stderr
    assert "kill refused" in done.stdout and not got


@ROOT_ONLY
def test_without_root_the_missing_protections_are_recorded():
    """Where the lockdown starts without root (here: a process that already left it), the mounts
    are missing and said so; nothing fails silently."""
    code = """
import json
from pkb_core.confine import lockdown, sandbox
assert sandbox.switch_user(sandbox.SANDBOX_UID_BASE + 4321) is None
print(json.dumps(lockdown.lock_down(network=False, writable=["/tmp"], user=sandbox.SANDBOX_UID_BASE + 1)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    gaps = json.loads(done.stdout.splitlines()[-1])
    assert any(gap.startswith("read-only file system") for gap in gaps), gaps
    assert any(gap.startswith("a user of its own") for gap in gaps), gaps


def test_a_planted_bytecode_file_never_runs_for_a_solution(tmp_path):
    """Solutions are compiled from their text: an unchecked hash-based .pyc in __pycache__ (what
    a sibling could plant) is never read, and none is written."""
    import importlib.util
    from importlib._bootstrap_external import _code_to_hash_pyc

    from pkb_core.candidate.solution import load_solution

    path = tmp_path / "1_allreduce_x.py"
    path.write_text("def solution(tensor):\n    return 'honest'\n")
    planted = Path(importlib.util.cache_from_source(str(path)))
    planted.parent.mkdir()
    evil = compile("def solution(tensor):\n    return 'planted'\n", str(path), "exec")
    planted.write_bytes(_code_to_hash_pyc(evil, b"\0" * 8, checked=False))
    assert load_solution(path)(None) == "honest"
    assert [p.name for p in planted.parent.iterdir()] == [planted.name]


@ROOT_ONLY
def test_shared_memory_folders_cannot_be_planted_and_belong_to_their_group(tmp_path, monkeypatch):
    from pkb_core.errors import PkbError
    from pkb_core.harness.parcel import pack
    from pkb_core.launch import scratch

    monkeypatch.setattr(scratch, "shm_root", lambda: str(tmp_path))
    (tmp_path / "pkb-planted").symlink_to(tmp_path)
    with pytest.raises(PkbError, match="not a folder pkb made"):
        scratch.Scratch.for_launch("planted").group("judge1")
    launch = scratch.Scratch.for_launch("abc")
    judge, job = launch.group("judge1"), launch.group("job1", uid=0x70000001)
    assert os.stat(launch.path).st_mode & 0o777 == 0o711
    assert (os.stat(judge).st_uid, os.stat(judge).st_mode & 0o777) == (0, 0o700)
    assert (os.stat(job).st_uid, os.stat(job).st_mode & 0o777) == (0x70000001, 0o700)
    # The judge (root) writes a job's inputs into the job's folder: they are the job user's to read.
    import torch

    pack({"x": torch.ones(3)}, os.path.join(job, "pkb-parcel-in0-r0"))
    assert os.stat(os.path.join(job, "pkb-parcel-in0-r0")).st_uid == 0x70000001
    launch.remove()
    assert not os.path.exists(launch.path)


@ROOT_ONLY
def test_a_groups_folder_starts_with_the_judges_triton_cache_as_its_own(tmp_path, monkeypatch):
    """A candidate group's folder (its Triton cache) starts with a copy of the judge's: pkb's own
    kernels, compiled once, found there instead of compiled by every side. The copy is the group
    user's, and a link in the seed is not followed into the group's folder."""
    from pkb_core.launch import scratch

    monkeypatch.setattr(scratch, "shm_root", lambda: str(tmp_path / "shm"))
    (tmp_path / "shm").mkdir()
    seed = tmp_path / "seed"
    (seed / "A1B2").mkdir(parents=True)
    (seed / "A1B2" / "_chacha20_xor.cubin").write_bytes(b"\x7fELF kernel")
    (seed / "A1B2" / "secret-link").symlink_to("/etc/shadow")
    launch = scratch.Scratch.for_launch("seeded")
    job = launch.group("job1", uid=0x70000002, seed=seed)
    kernel = os.path.join(job, "A1B2", "_chacha20_xor.cubin")
    assert open(kernel, "rb").read() == b"\x7fELF kernel"
    assert {os.stat(p).st_uid for p in (job, os.path.dirname(kernel), kernel)} == {0x70000002}
    assert not os.path.lexists(os.path.join(job, "A1B2", "secret-link"))
    assert os.listdir(launch.group("job2", uid=0x70000003, seed=tmp_path / "none")) == []
    launch.remove()


def test_no_candidate_reaches_the_judges_store_or_another_groups(pkb_invoke, tmp_path):
    """A reference-backend candidate keeps its network, so it can open TCP connections: the
    judge's store (served by the launcher) and the next job's keeper stop accepting new ones as
    soon as their own ranks are connected. The fixture tries every 127.0.0.1 listener as a c10d
    store, poisons the judge's barrier keys and stores data wherever it gets in; it reaches none,
    and the honest all-reduce after it is timed and passes."""
    folder = Path(__file__).parent / "fixtures" / "sandbox_network"
    run = tmp_path / "run"
    result = pkb_invoke("run", "--solutions", folder, "--problem", "1", "--trials", "2", "--measure-perf",
                        "--out", run, "--json")
    verdicts = {Path(r["solution"]).name: r["verdict"] for r in json.loads(result.stdout)["results"]}
    assert verdicts == {"1_allreduce_a_poisons_every_store.py": "fail", "1_allreduce_b_honest.py": "pass"}
    said = [line for log in (run / "logs").glob("job-*.log") for line in log.read_text().splitlines()
            if line.startswith("ATTACK reached")]
    assert said == ["ATTACK reached stores on ports []"]


@ROOT_ONLY
def test_libraries_that_write_under_home_work_as_the_jobs_user(pkb_invoke, plainpy, tmp_path, monkeypatch):
    """CuPy keeps its kernel cache in ``~/.cupy`` (the NVRTC samples failed there with
    PermissionError as a job's user on 2xH200): a candidate's HOME and cache variables are its
    scratch, while pkb's own cache, found from HOME before, is still where the builds are."""
    honest = (FIXTURES / "1_allreduce_b_honest.py").read_text()
    writes = ('import os\n'
              'os.makedirs(os.path.expanduser("~/.cupy/kernel_cache"), exist_ok=True)\n'
              'os.makedirs(os.path.join(os.environ["XDG_CACHE_HOME"], "somelib"), exist_ok=True)\n'
              f'assert os.environ["PKB_CACHE_DIR"] == {str(tmp_path / "cache")!r}, os.environ["PKB_CACHE_DIR"]\n')
    folder = tmp_path / "solutions"
    folder.mkdir()
    (folder / "1_allreduce_home.py").write_text(writes + honest)
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    result = pkb_invoke("run", "--backend", "plainpy", "--solutions", folder, "--problem", "1", "--trials", "1",
                        "--out", tmp_path / "run", "--json", "--timeout", "60")
    (record,) = _records(result).values()
    assert record["verdict"] == "pass", record["reason"]


_LISTS_SHARED_MEMORY_MOUNTS = '''
import torch.distributed as dist


def solution(tensor):
    points = set()
    with open("/proc/self/mountinfo") as info:
        for line in info:
            point = line.split()[4]
            if point == "/dev/shm" or point.startswith("/dev/shm/"):
                points.add(point)
    chain = sorted(points, key=len)
    if any(not inner.startswith(outer) for outer, inner in zip(chain, chain[1:])):
        raise ValueError(f"mounts of other folders in /dev/shm: {chain}")
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''


@ROOT_ONLY
def test_a_candidate_lists_no_other_jobs_folders_among_its_mounts(pkb_invoke, tmp_path):
    """Another launch's folder in ``/dev/shm`` (a tmpfs of its own, as every launch's, group's and
    build's is) was listed in a candidate's ``/proc/self/mountinfo`` under its own ``/dev/shm``,
    with its name and its user (a hostile review saw another session's job folder): a candidate's
    namespace now holds, in ``/dev/shm``, its own folder and its ancestors alone."""
    other = Path("/dev/shm") / f"pkb-othertest-{os.getpid()}"
    other.mkdir()
    try:
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(other)]).returncode != 0:
            pytest.skip("cannot mount a tmpfs here")
        try:
            solution = tmp_path / "1_allreduce.py"
            solution.write_text(_LISTS_SHARED_MEMORY_MOUNTS)
            result = pkb_invoke("run", "--backend", "reference", "--solution", solution, "--trials", "1", "--json",
                                "--out", tmp_path / "run")
            (record,) = json.loads(result.stdout)["results"]
            assert record["verdict"] == "pass", record["reason"]
        finally:
            subprocess.run(["umount", str(other)])
    finally:
        other.rmdir()
