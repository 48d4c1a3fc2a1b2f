"""Issue 54 items 1 and 2: a builder is a user of its own and writes only its own output; a builder
and a candidate see only what they need (their solution, the problem, pkb's cache, Python), a
``/tmp`` and a ``/proc`` of their own.

One ``pkb run`` of a solution that looks, at import (in its builder, then its candidate) and at call
time, for other runs' files in ``/tmp``, another process's command line, the machine's listening
sockets through ``/proc/1/net`` and a root file beside its source, and that writes where pkb's cache
keeps other builds; then an honest job. And the compile phase's publication of a build's output,
read as a hostile builder would fill it.
"""
import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "isolation"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a user of its own and a mount namespace need root")


def _listening(table: str, port: int) -> bool:
    lines = Path(table).read_text().splitlines()[1:]
    return any(line.split()[1].endswith(":%04X" % port) and line.split()[3] == "0A" for line in lines)


@ROOT_ONLY
def test_a_build_and_a_job_see_nothing_of_other_runs_or_the_machine(pkb_invoke, tmp_path, monkeypatch):
    """The hostile file finds nothing in its builder or its candidate, at import or call time (the
    launcher's working folder in /tmp included), and passes (it names whatever it finds in its
    verdict); the honest job after it passes. Its
    builder's writes left the cache's entry and the outcomes as they were, and pkb published the
    entry it built (the launcher's, 0644), not the file it put at the top of the cache."""
    mark = secrets.token_hex(4)
    other = Path(tempfile.mkdtemp(prefix=f"pkbtest-other-run-{mark}-", dir="/tmp"))
    marker = f"0.{secrets.randbelow(10 ** 9):09d}"  # known here: its /proc cmdline may not be the sleep's yet
    sleeper = subprocess.Popen(["sleep", "600", marker])
    server = socket.socket()
    try:
        os.chmod(other, 0o755)  # another run's folder, readable by anyone who finds it
        (other / f"records-{mark}.jsonl").write_text('{"verdict": "pass"}\n')
        (tmp_path / f"beside-the-solutions-{mark}.txt").write_text("another test's file")
        # The launcher's working folder, in /tmp: python -m put it on the import path, and the
        # lockdown bound it back whole (a candidate read another run's output there).
        launcher_cwd = tmp_path / "launcher-cwd"
        launcher_cwd.mkdir()
        (launcher_cwd / f"in-the-launchers-folder-{mark}.json").write_text('{"verdict": "pass"}')
        os.chmod(tmp_path, 0o755)
        os.chmod(launcher_cwd, 0o755)
        monkeypatch.chdir(launcher_cwd)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        cache = tmp_path / "cache"
        victim = cache / "pkbtest" / "victim" / "pkb-ok.json"
        victim.parent.mkdir(parents=True)
        victim.write_text('{"built_as": "victim"}')
        solutions = tmp_path / "solutions"
        shutil.copytree(FIXTURES, solutions)
        secret = solutions / "secret.txt"
        secret.write_text("a root file")
        secret.chmod(0o600)
        for name, value in {"PKB_CACHE_DIR": cache, "PKB_TEST_MARK": mark, "PKB_TEST_MARKER": marker,
                            "PKB_TEST_PORT": port, "PKB_TEST_ROOT_FILE": secret}.items():
            monkeypatch.setenv(name, str(value))
        # Seen from here, they are there to find.
        deadline = time.monotonic() + 10  # the sleep's exec may still be under way
        while marker not in Path(f"/proc/{sleeper.pid}/cmdline").read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _listening("/proc/self/net/tcp", port) and marker in Path(f"/proc/{sleeper.pid}/cmdline").read_text()

        out = tmp_path / "run"
        result = pkb_invoke("run", "--backend", "reference", "--solutions", solutions, "--problem", "1",
                            "--nproc", "2", "--trials", "1", "--out", out, "--json")
        records = {Path(r["solution"]).stem: r for r in json.loads(result.stdout)["results"]}
        for name in ("1_allreduce_a_looks_beyond_itself", "1_allreduce_b_honest"):
            assert records[name]["verdict"] == "pass", records[name]["reason"]
            assert not records[name].get("lockdown_gaps"), records[name]["lockdown_gaps"]
        logs = "".join(path.read_text(errors="replace") for path in (out / "logs").rglob("*.log"))
        for where in ("builder at import", "candidate at import", "candidate at call time"):
            assert f"pkbtest looked in its {where}" in logs, logs[-3000:]

        assert victim.read_text() == '{"built_as": "victim"}'
        assert not (cache / "builds" / "x.json").exists()
        published = cache / "pkbtest" / "published" / "built.txt"
        assert published.read_text() == "built by the solution's build"
        info = published.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o644)
        assert not (cache / "pkbtest-top.txt").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        server.close()
        shutil.rmtree(other, ignore_errors=True)


def _output(tmp_path) -> tuple[Path, Path]:
    """An output folder as a builder leaves it (its upper layer) and a cache to publish into."""
    upper = tmp_path / "output" / "upper"
    upper.mkdir(parents=True)
    cache = tmp_path / "cache"
    (cache / "cuda" / "held").mkdir(parents=True)
    (cache / "cuda" / "held" / "module.so").write_text("the first build's")
    return upper, cache


def test_pkb_publishes_a_builds_new_entries_and_nothing_else(tmp_path):
    """New entries are copied in, folders and files only, with pkb's modes; an entry the cache
    holds stays as it was, and a file at the top of the cache, pkb's own folders, temporary names
    and empty locks are not published: the judge's Triton cache, whose kernels every job's folder
    starts with, is one of pkb's own (a build that planted a kernel there ran in the judge)."""
    from pkb_core.compile.output import PKB_OWN, publish

    upper, cache = _output(tmp_path)
    built = upper / "cuda" / "key1"
    (built / "sub").mkdir(parents=True)
    (built / "module.so").write_bytes(b"\x7fELF" + bytes(3 << 20))
    (built / "module.so").chmod(0o775)
    (built / "sub" / "pkb-ok.json").write_text("{}")
    (built / "sub" / "pkb-ok.json").chmod(0o600)
    (upper / "cuda" / "held").mkdir()
    (upper / "cuda" / "held" / "module.so").write_text("a later build's")
    (upper / "top.txt").write_text("x")
    assert "triton-judge" in PKB_OWN
    for own in ("builds", "calibration", "triton-judge"):
        (upper / own / "entry").mkdir(parents=True)
    (upper / "cuda" / ".key2.123.tmp").mkdir()
    (upper / "cuda" / "key3.lock").touch()

    assert publish(str(upper.parent), cache) == ["cuda/key1"]
    assert (cache / "cuda" / "key1" / "module.so").read_bytes() == (built / "module.so").read_bytes()
    modes = {path.relative_to(cache).as_posix(): stat.S_IMODE(path.stat().st_mode)
             for path in (cache / "cuda" / "key1").rglob("*")}
    assert modes == {"cuda/key1/module.so": 0o755, "cuda/key1/sub": 0o755, "cuda/key1/sub/pkb-ok.json": 0o644}
    assert stat.S_IMODE((cache / "cuda" / "key1").stat().st_mode) == 0o755
    assert (cache / "cuda" / "held" / "module.so").read_text() == "the first build's"
    assert sorted(p.name for p in cache.iterdir()) == ["cuda"]
    assert sorted(p.name for p in (cache / "cuda").iterdir()) == ["held", "key1"]


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "fifo", "deep"])
def test_pkb_publishes_nothing_of_an_output_that_holds_more_than_folders_and_files(tmp_path, plant):
    """A symbolic link (to a root file), a hard link, a pipe or a folder nested past the limit
    anywhere in a build's output refuses all of it: the good entry beside it is not published
    either, and the refusal names the path."""
    from pkb_core.compile.output import MAX_DEPTH, Refused, publish

    upper, cache = _output(tmp_path)
    (upper / "cuda" / "good").mkdir(parents=True)
    (upper / "cuda" / "good" / "module.so").write_text("fine")
    bad = upper / "cuda" / "zbad"
    bad.mkdir()
    if plant == "symlink":
        (bad / "module.so").symlink_to("/etc/shadow")
    elif plant == "hardlink":
        (bad / "a").write_text("x")
        os.link(bad / "a", bad / "b")
    elif plant == "fifo":
        os.mkfifo(bad / "pipe")
    else:
        (bad / "/".join(["d"] * (MAX_DEPTH + 2))).mkdir(parents=True)
    with pytest.raises(Refused, match="cuda/zbad"):
        publish(str(upper.parent), cache)
    assert sorted(p.name for p in (cache / "cuda").iterdir()) == ["held"]
