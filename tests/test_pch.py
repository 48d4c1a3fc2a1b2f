"""pkb's precompiled headers (pkb_core.compile.pch), with real g++ builds of a small header."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pkb_core.compile import pch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")

TEXT = "#include <map>\n#include <string>\n#include <vector>\n"
FLAGS = ("-O2", "-std=c++17", "-fPIC")


def header(flags=FLAGS, text=TEXT, use_defines=("-DMODULE_NAME=probe",)) -> pch.PrecompiledHeader:
    return pch.PrecompiledHeader(text=text, compiler=("g++",), flags=tuple(flags), use_defines=use_defines,
                      identity={"library": "1.0"})


@pytest.fixture(autouse=True)
def _fresh_process_memo():
    pch._READY.clear()
    yield
    pch._READY.clear()


def compile_with(path, flags, tmp_path) -> str:
    """Compile a file that includes the header itself; return g++'s -H include trace."""
    src = tmp_path / "user.cpp"
    src.write_text("#include <vector>\nint user(){ std::vector<int> v{1,2}; return v[1]; }\n")
    proc = subprocess.run(["g++", *flags, "-DMODULE_NAME=user", *pch.pch_flags(path), "-H", "-c", str(src),
                           "-o", str(tmp_path / "user.o")], capture_output=True, text=True, check=True)
    return proc.stderr


def test_key_changes_with_flags_text_and_identity_only():
    base = header()
    assert header().key == base.key
    assert header(flags=("-O3", "-std=c++17", "-fPIC")).key != base.key
    assert header(text=TEXT + "#include <set>\n").key != base.key
    assert pch.PrecompiledHeader(TEXT, ("g++",), FLAGS, identity={"library": "2.0"}).key != base.key


def test_built_once_and_used_by_a_compile(tmp_path):
    path = pch.ensure_pch(header(), root=tmp_path / "pch")
    assert path is not None and path.with_suffix(".h.gch").is_file()
    record = json.loads((path.parent / "pch.json").read_text())
    assert record["flags"] == list(FLAGS) and any(h.endswith("/vector") for h in record["headers"])
    trace = compile_with(path, FLAGS, tmp_path)
    assert f"! {path}.gch" in trace  # '!': GCC loaded the precompiled form
    pch._READY.clear()
    assert pch.ensure_pch(header(), root=tmp_path / "pch") == path
    assert json.loads((path.parent / "pch.json").read_text())["built_at"] == record["built_at"]  # not rebuilt


def test_other_flags_get_their_own_pch(tmp_path):
    first = pch.ensure_pch(header(), root=tmp_path / "pch")
    second = pch.ensure_pch(header(flags=("-O0", "-std=c++17", "-fPIC")), root=tmp_path / "pch")
    assert first.parent != second.parent and first.with_suffix(".h.gch").is_file()


def test_a_broken_pch_falls_back_with_a_notice_then_is_rebuilt(tmp_path, capfd):
    root = tmp_path / "pch"
    path = pch.ensure_pch(header(), root=root)
    gch = path.with_suffix(".h.gch")
    gch.write_bytes(gch.read_bytes()[:1000])  # truncated, as by a full disk
    pch._READY.clear()
    assert pch.ensure_pch(header(), root=root) is None
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unusable" in err[0] and "compiling without it" in err[0]
    assert pch.ensure_pch(header(), root=root) == path  # the next compile gets a fresh one
    assert gch.stat().st_size == json.loads((path.parent / "pch.json").read_text())["size"]


def test_a_header_that_changed_makes_it_stale(tmp_path, capfd):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "mine.h").write_text("inline int mine() { return 1; }\n")
    h = header(text='#include "mine.h"\n', flags=(*FLAGS, f"-I{inc}"))
    assert pch.ensure_pch(h, root=tmp_path / "pch") is not None
    (inc / "mine.h").write_text("inline int mine() { return 2; }\n")
    pch._READY.clear()
    assert pch.ensure_pch(h, root=tmp_path / "pch") is None
    assert "a header it was made from changed" in capfd.readouterr().err


def test_a_header_that_does_not_compile_is_a_notice_and_not_retried_at_once(tmp_path, capfd):
    bad = header(text="#include <no_such_header_pkb.h>\n")
    assert pch.ensure_pch(bad, root=tmp_path / "pch") is None
    assert "could not be built" in capfd.readouterr().err
    assert (tmp_path / "pch" / f"{bad.key}.failed").is_file()
    assert pch.ensure_pch(bad, root=tmp_path / "pch") is None
    assert "failed to build recently" in capfd.readouterr().err


def test_a_define_the_header_reads_makes_it_unusable(tmp_path, capfd):
    reads = header(text="#ifdef MODULE_NAME\n#error no\n#endif\n#include <vector>\n")
    assert pch.ensure_pch(reads, root=tmp_path / "pch") is None
    assert "does not load with the users' flags" in capfd.readouterr().err


def test_not_gcc_means_no_pch(tmp_path):
    assert pch.ensure_pch(pch.PrecompiledHeader(TEXT, ("true",), FLAGS), root=tmp_path / "pch") is None


#: One builder, as its own process: ensures the header of :func:`header` under the root in argv[1].
_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_pch import header
from pkb_core.compile import pch
print(pch.ensure_pch(header(), root=Path(sys.argv[1])))
"""


def test_concurrent_builders_share_one_pch(tmp_path):
    import sys
    from pathlib import Path

    root = tmp_path / "pch"
    # Four processes of their own at once (not forks of this one: a fork of a process with threads
    # may inherit a held lock and never run).
    code = _CHILD.format(tests=str(Path(__file__).parent))
    children = [subprocess.Popen([sys.executable, "-c", code, str(root)], stdout=subprocess.PIPE, text=True)
                for _ in range(4)]
    paths = [child.communicate(timeout=300)[0].strip() for child in children]
    assert len(set(paths)) == 1 and paths[0] != "None"
    folders = [p.name for p in root.iterdir()]
    key = header().key
    assert sorted(folders) == sorted([key, f"{key}.lock"])  # no scratch folders or second copies left
    record = json.loads((root / key / "pch.json").read_text())
    assert record["size"] == (root / key / "pkb_pch.h.gch").stat().st_size


def test_a_cache_it_cannot_write_means_no_pch_and_a_notice(tmp_path, monkeypatch, capfd):
    import errno

    def read_only(path):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(pch, "file_lock", read_only)  # as in a candidate's lockdown
    assert pch.ensure_pch(header(), root=tmp_path / "pch") is None
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Read-only file system" in err[0] and "compiling without it" in err[0]
