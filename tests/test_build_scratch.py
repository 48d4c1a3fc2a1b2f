"""Issue 54: what one build or job leaves is no other's, and nothing of a build outlives it.

A build's temporary folder is the compile phase's: a tmpfs of the builder's own mount namespace,
bounded by its memory limit, removed once its processes are ended, however the build ended (an
exception, SIGKILL, its time limit, a child left writing); a maker killed outright leaves it to its
warden; stale ones are swept. Build outcomes are the launcher's (0600 in a 0700 folder, hidden from
builders); run folders are 0700 and records 0600, still read by ``pkb report``.
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace and a user per job need root")


def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``PKB_TEST_MARK=mark`` (pkb's own variables reach builders)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if f"PKB_TEST_MARK={mark}".encode() in environ.read().split(b"\0"):
                    with open(f"/proc/{pid}/stat") as stat:
                        if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(pid))
        except OSError:
            continue
    return found


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@ROOT_ONLY
def test_a_builds_temporary_space_is_bounded_and_gone_however_the_build_ends(pkb_invoke, tmp_path, monkeypatch):
    """One ``pkb build`` of four hostile builds and an honest one: the looker's temporary folder is a
    tmpfs of its build's memory limit and it finds no other outcome; after the phase nothing of any
    build is left in the temporary folder (the SIGKILLed one's, the timed-out one's, the one whose
    child went on writing), no process of theirs lives, the folders of dead makers and week-old
    unnamed ones are swept (a live maker's and a fresh one are kept), and the outcomes are 0600 in
    a 0700 folder."""
    from pkb_core.cache import builds_dir
    from pkb_core.machine.limits import build_memory_mib
    from pkb_core.process.temp_folders import start_time

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    mark = secrets.token_hex(4)
    monkeypatch.setenv("PKB_TEST_MARK", mark)
    builds_dir().mkdir(parents=True)
    (builds_dir() / "planted.json").write_text('{"ok": false, "message": "another client\'s compiler message"}')
    stale = [tmp / f"pkb-build-{_dead_pid()}-12345-abcd", tmp / "pkb-build-old_lost"]
    kept = [tmp / f"pkb-build-{os.getpid()}-{start_time(os.getpid())}-beef", tmp / "pkb-build-new_lost"]
    for folder in stale + kept:
        folder.mkdir()
        (folder / "junk").write_bytes(b"x" * 1024)
    week_ago = time.time() - 7 * 86400
    os.utime(stale[1], (week_ago, week_ago))

    result = pkb_invoke("build", "--backend", "reference", "--solutions", FIXTURES / "build_scratch", "--problem",
                        "1", "--build-timeout", "10", "--json")
    builds = {Path(line["build"]["solution"]).stem.split("_", 2)[2]: line["build"]
              for line in map(json.loads, result.stdout.splitlines()[:-1])}

    seen = json.loads(builds["a_looks_around"]["message"].split("seen ", 1)[1].rsplit(" (", 1)[0])
    assert seen["fs"] == "tmpfs", seen
    assert f"size={build_memory_mib() << 10}k" in seen["options"].split(","), seen
    assert seen["outcomes"] == {}, seen  # the outcomes folder is hidden from builders
    assert "died with SIGKILL" in builds["b_killed_mid_build"]["message"]
    assert "did not finish within 10 s" in builds["c_hangs"]["message"]
    assert "left a writer behind" in builds["d_leaves_a_writer"]["message"]
    assert builds["e_honest"]["ok"], builds["e_honest"]
    assert sorted(tmp.iterdir()) == sorted(kept), sorted(tmp.iterdir())
    assert _marked(mark) == []  # the writer its build left ended with it
    assert builds_dir().stat().st_mode & 0o777 == 0o700
    assert {path.stat().st_mode & 0o777 for path in builds_dir().glob("*.json") if path.name != "planted.json"} \
        == {0o600}


@ROOT_ONLY
def test_a_build_that_makes_files_until_it_cannot_fills_its_own_output_folder(pkb_invoke, tmp_path, monkeypatch):
    """What a build adds to its view of pkb's cache lands in its output folder, which lay in
    /dev/shm itself: a build making empty files there (no memory limit counts them) could use up
    the inodes that every job's folder needs (a hostile review, 2026-12-01). The folder is a tmpfs
    of its own: the build stops at its inodes."""
    from pkb_core.compile.output import BUILD_INODES

    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    result = pkb_invoke("build", "--backend", "reference", "--solutions", FIXTURES / "build_inodes", "--problem", "1",
                        "--build-timeout", "60", "--json")
    build = json.loads(result.stdout.splitlines()[0])["build"]
    made = int(build["message"].split("made ")[1].split(" files")[0])
    assert BUILD_INODES - 100 < made < BUILD_INODES, build["message"]


def test_a_build_folder_outlives_no_maker_killed_outright(tmp_path):
    """``kill -9`` of ``pkb build`` while its build hangs: the maker runs no code, its warden ends the
    build's processes and removes the build's folders (the build's temporary one, pkb build's own)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    mark = secrets.token_hex(4)
    env = dict(os.environ, TMPDIR=str(tmp), PKB_CACHE_DIR=str(tmp_path / "cache"), PKB_TEST_MARK=mark)
    proc = subprocess.Popen([sys.executable, "-m", "pkb_core", "build", "--backend", "reference", "--solution",
                             str(FIXTURES / "build_scratch" / "1_allreduce_c_hangs.py")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not any(p.name.startswith("pkb-build-") and "run" not in p.name for p in tmp.iterdir()):
            assert time.monotonic() < deadline and proc.poll() is None, "no build started"
            time.sleep(0.1)
        time.sleep(1)  # the build is writing its folder
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while list(tmp.iterdir()) or _marked(mark):
            assert time.monotonic() < deadline, (list(tmp.iterdir()), _marked(mark))
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stale_folders_are_those_of_makers_gone():
    """The sweep removes a folder whose maker's pid is gone or names another process (a reused pid),
    and an unnamed one nothing changed in for a day; never a live maker's, a fresh unnamed one, another
    prefix's or another user's."""
    from pkb_core.process import temp_folders

    root = Path(tempfile.mkdtemp(prefix="pkbtest-sweep-"))
    try:
        own = Path(temp_folders.make("pkb-x-", str(root)))
        gone = root / f"pkb-x-{_dead_pid()}-{temp_folders.start_time(os.getpid())}-ab"
        reused = root / f"pkb-x-{os.getpid()}-1-ab"  # this pid, another start time
        old, fresh, other = root / "pkb-x-abcd_123", root / "pkb-x-efgh_456", root / "pkb-y-abcd_123"
        for folder in (gone, reused, old, fresh, other):
            folder.mkdir()
        for folder in (old, other):
            os.utime(folder, (time.time() - 2 * 86400,) * 2)
        if os.geteuid() == 0:
            foreign = root / "pkb-x-ijkl_789"
            foreign.mkdir()
            os.chown(foreign, 65534, 65534)
            os.utime(foreign, (time.time() - 2 * 86400,) * 2)
        removed = temp_folders.sweep("pkb-x-", str(root))
        assert sorted(removed) == sorted(map(str, (gone, reused, old)))
        assert own.is_dir() and fresh.is_dir() and other.is_dir()
        assert own.stat().st_mode & 0o777 == 0o700
        temp_folders.remove(str(own))
        assert not own.exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@ROOT_ONLY
def test_no_job_reads_another_jobs_outcome_or_records_and_pkb_report_still_does(pkb_invoke, tmp_path, monkeypatch):
    """A candidate reads the build outcomes in pkb's cache (its run's other solution's among them) and
    the records of another run in a folder it may traverse: it can read neither (each names what it
    read in its verdict, else is honest and passes); the honest job after it passes. The run's own
    folder is 0700, its records 0600, and ``pkb report`` reads them."""
    from pkb_core.results.records import append_record, read_records

    shared = Path(tempfile.mkdtemp(prefix="pkbtest-runs-"))
    try:
        os.chmod(shared, 0o755)  # a machine's runs/ folder: traversable by anyone
        other = shared / "runs" / "earlier"
        for record in read_records(FIXTURES / "runs" / "samples"):
            append_record(other, record)
        assert other.stat().st_mode & 0o777 == 0o700 and (other / "records.jsonl").stat().st_mode & 0o777 == 0o600
        monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("PKB_TEST_OTHER_RUN", str(other))
        out = tmp_path / "run"
        result = pkb_invoke("run", "--backend", "reference", "--solutions", FIXTURES / "private_results",
                            "--problem", "1", "--nproc", "2", "--trials", "1", "--out", out, "--json")
        records = {Path(r["solution"]).stem: r for r in json.loads(result.stdout)["results"]}
        for name in ("1_allreduce_a_reads_other_jobs", "1_allreduce_b_honest"):
            assert records[name]["verdict"] == "pass", records[name]["reason"]
        assert out.stat().st_mode & 0o777 == 0o700
        assert (out / "records.jsonl").stat().st_mode & 0o777 == 0o600
        report = pkb_invoke("report", out)
        assert report.exit_code == 0 and "1_allreduce_b_honest" in report.output, report.output
    finally:
        shutil.rmtree(shared, ignore_errors=True)
