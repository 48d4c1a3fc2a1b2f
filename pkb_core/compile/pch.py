"""Precompiled headers owned by pkb: one per compiler, flags and header, built once per machine.

Compiling a torch extension's ``main.cpp`` spends almost all its time in
``torch/extension.h`` (23 s of 23 on the GPU machine). GCC can parse a header
once into a ``.gch`` file and load it in a fraction of that time on every
later compile that uses the same compiler and flags. torch's own ``use_pch``
writes that file into torch's install folder and deletes it whenever a caller
does not ask for it, so concurrent builds race; pkb keeps its own instead.

Layout (``root``, default :func:`pkb_core.cache.pch_dir`)::

    <key>/                  one finished header, moved into place by one rename
        pkb_pch.h           the header's text (GCC falls back to it when the .gch is unusable)
        pkb_pch.h.gch       GCC's precompiled form of it
        pch.json            how it was built: compiler, flags, size, the headers it read
    <key>.lock              held (``flock``) while one process builds it
    <key>.failed            why its build failed (retried after :data:`RETRY_FAILED_S`)

The key (:meth:`PrecompiledHeader.key`) is a hash of the compiler (its path and
``--version``), the flags, the header's text and what the caller adds (torch's
version): any change names a different folder. ``pch.json`` also records the
size and modification time of every header the ``.gch`` was made from, so a
header edited in place (a rebuilt torch of the same version) makes it stale.

Use: :func:`ensure` returns the path to pass as ``-include PATH`` (with
:func:`use_flags`), building it first if needed. Every process that asks for
the same key at once waits on the lock while one builds; the finished folder
appears by an atomic rename, so nobody sees half a ``.gch``. Whatever goes
wrong (the compiler is not GCC, the header does not compile, the ``.gch`` on
disk is truncated or stale) ends in ``None`` and one line on stderr: the
caller then compiles as it would have without a PCH. The PCH never changes
what a compile produces: with the same flags GCC writes the same object file
(checked on torch's ``main.cpp``: byte-identical ``main.o``).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pkb_core.compile.files import file_lock, write_atomic

#: The header's file name inside its folder (``-include <folder>/pkb_pch.h``).
HEADER_NAME = "pkb_pch.h"
#: A failed PCH build is not retried for this long (every builder would pay it again).
RETRY_FAILED_S = 600.0
#: Seconds a PCH build may take (torch/extension.h: about 37 s on the GPU machine).
BUILD_TIMEOUT_S = 600.0

_READY: dict[str, Path] = {}  # key -> header path already checked in this process


def build_notice(message: str) -> None:
    """Say one line on stderr (why a compile goes on without the PCH)."""
    print(f"pkb: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class PrecompiledHeader:
    """What a PCH is made of.

    :param text: the header's text, e.g. ``"#include <torch/extension.h>\\n"``.
    :param compiler: the compiler command, e.g. ``("c++",)``.
    :param flags: the flags every user of the PCH compiles with (GCC takes the
        ``.gch`` only when they match what it was built with).
    :param use_defines: ``-D`` flags the users add that the header must not
        depend on (a module's name); the PCH is checked to load with them.
    :param identity: what else the header's content depends on (a library's version).
    """

    text: str
    compiler: tuple
    flags: tuple
    use_defines: tuple = ()
    identity: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        """A hash of the compiler, flags, header text and identity (32 hex digits)."""
        payload = json.dumps({"text": self.text, "compiler": compiler_identity(tuple(self.compiler)),
                              "flags": list(self.flags), "identity": self.identity}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=None)
def compiler_identity(compiler: tuple) -> dict:
    """The compiler's resolved path, ``--version`` and whether ``-v`` says it
    is GCC (cached per process)."""
    path = shutil.which(compiler[0]) or compiler[0]

    def output(flag):
        try:
            proc = subprocess.run([*compiler, flag], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return ""
        return proc.stdout + proc.stderr

    verbose = output("-v")
    gcc = "gcc version" in verbose and "clang" not in verbose.lower()
    return {"path": os.path.realpath(path), "version": output("--version").strip(), "gcc": gcc}


def is_gcc(compiler) -> bool:
    """Whether ``compiler`` is GCC (the ``.gch`` format is GCC's; clang's differs)."""
    return compiler_identity(tuple(compiler))["gcc"]


def pch_flags(header_path: Path) -> list[str]:
    """Flags that make a compile load the PCH: ``-include`` it (the file's own
    ``#include <...>`` of the same header is then skipped by its include
    guard) and warn when GCC cannot use the ``.gch`` (it then reads the text)."""
    return ["-include", str(header_path), "-Winvalid-pch"]


def ensure_pch(header: PrecompiledHeader, root: Path | None = None) -> Path | None:
    """The path of ``header``'s PCH (pass it to :func:`use_flags`), built now
    if no valid one exists; ``None``, after one line on stderr, when there is
    none to use (see the module docstring)."""
    from pkb_core.cache import pch_dir

    if not is_gcc(header.compiler):
        return None  # not an error: other compilers just build without one
    root = Path(root) if root is not None else pch_dir()
    key = header.key
    if key in _READY and _READY[key].exists():
        return _READY[key]
    folder = root / key
    problem = _problem(folder)
    if problem is None:
        _READY[key] = folder / HEADER_NAME
        return _READY[key]
    try:
        return _ensure_locked(header, root, key, folder)
    except OSError as exc:  # a read-only cache (a candidate's own build), a full disk: no PCH
        build_notice(f"precompiled header {key} unavailable ({type(exc).__name__}: {exc}); compiling without it")
        return None


def _ensure_locked(header: PrecompiledHeader, root: Path, key: str, folder: Path) -> Path | None:
    """:func:`ensure`'s part under the lock: wait, re-check, set aside, build."""
    root.mkdir(parents=True, exist_ok=True)
    with file_lock(root / f"{key}.lock"):
        problem = _problem(folder)  # another process may have built it while we waited
        if problem is None:
            _READY[key] = folder / HEADER_NAME
            return _READY[key]
        if folder.exists():
            # Broken or stale: this compile goes on without it; the next one gets a fresh PCH.
            build_notice(f"precompiled header {folder} is unusable ({problem}); compiling without it, rebuilding it "
                   f"for the next compile")
            _set_aside(folder)
            return None
        failed = root / f"{key}.failed"
        if failed.is_file() and time.time() - failed.stat().st_mtime < RETRY_FAILED_S:
            build_notice(f"precompiled header {key} failed to build recently; compiling without it "
                   f"({failed.read_text().splitlines()[0]})")
            return None
        message = _build(header, root, folder)
        if message is not None:
            write_atomic(failed, message + "\n")
            build_notice(f"precompiled header {key} could not be built ({message.splitlines()[0]}); "
                   "compiling without it")
            return None
        with contextlib.suppress(FileNotFoundError):
            failed.unlink()
    _READY[key] = folder / HEADER_NAME
    return _READY[key]


def _problem(folder: Path) -> str | None:
    """Why the PCH in ``folder`` cannot be used, or ``None`` when it can."""
    try:
        record = json.loads((folder / "pch.json").read_text())
    except FileNotFoundError:
        return "missing" if not folder.exists() else "no pch.json"
    except (OSError, ValueError) as exc:
        return f"pch.json unreadable: {exc}"
    gch = folder / f"{HEADER_NAME}.gch"
    try:
        size = gch.stat().st_size
    except OSError:
        return "its .gch is missing"
    if size != record.get("size"):
        return f"its .gch is {size} bytes, {record.get('size')} when built"
    if _fingerprint(record.get("headers", [])) != record.get("fingerprint"):
        return "a header it was made from changed since"
    return None


def _build(header: PrecompiledHeader, root: Path, folder: Path) -> str | None:
    """Build ``header``'s PCH into ``folder`` (a scratch folder renamed into
    place once it works); the compiler's message on failure, else ``None``."""
    scratch = Path(root) / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        source = scratch / HEADER_NAME
        source.write_text(header.text)
        gch = scratch / f"{HEADER_NAME}.gch"
        started = time.time()
        cmd = [*header.compiler, "-x", "c++-header", *header.flags, str(source), "-o", str(gch),
               "-MD", "-MF", str(scratch / "deps.d")]
        failure = _run(cmd)
        if failure:
            return failure
        seconds = time.time() - started
        # Check it loads with what users add (a -D the header turns out to read makes GCC refuse it).
        probe = scratch / "probe.cpp"
        probe.write_text("int pkb_pch_probe;\n")
        failure = _run([*header.compiler, *header.flags, *header.use_defines, "-include", str(source),
                        "-Winvalid-pch", "-Werror=invalid-pch", "-fsyntax-only", str(probe)])
        if failure:
            return f"it does not load with the users' flags: {failure}"
        headers = _dependencies(scratch / "deps.d", source)
        record = {"compiler": list(header.compiler), "compiler_identity": compiler_identity(tuple(header.compiler)),
                  "flags": list(header.flags), "identity": header.identity, "size": gch.stat().st_size,
                  "seconds": round(seconds, 1), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "pid": os.getpid(),
                  "headers": headers, "fingerprint": _fingerprint(headers)}
        (scratch / "pch.json").write_text(json.dumps(record, indent=1))
        for leftover in (probe, scratch / "deps.d"):
            leftover.unlink()
        os.rename(scratch, folder)
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(cmd) -> str | None:
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if proc.returncode:
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        return "\n".join(lines[-20:]) or f"{cmd[0]} exited with status {proc.returncode}"
    return None


def _dependencies(depfile: Path, source: Path) -> list[str]:
    """The headers a ``-MD`` dependency file lists (its own source left out)."""
    text = depfile.read_text().replace("\\\n", " ")
    _, _, files = text.partition(":")
    return sorted({name for name in files.split() if name != str(source)})


def _fingerprint(headers) -> str:
    """Size and modification time of each header, hashed (a stat each: milliseconds for torch's)."""
    digest = hashlib.sha256()
    for name in headers:
        try:
            info = os.stat(name)
            digest.update(f"{name}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{name}\0missing\n".encode())
    return digest.hexdigest()


def _set_aside(folder: Path) -> None:
    """Move a broken PCH out of the way, then delete it (a compile that has it
    open keeps reading its inode; the rename makes room for the new one)."""
    aside = folder.with_name(f".{folder.name}.broken.{os.getpid()}")
    with contextlib.suppress(OSError):
        os.rename(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)
