"""A folder a locked-down process reads whole and writes only into a layer of its own: a builder's pkb cache.

A builder runs the solution's code as a user of its own (:mod:`pkb_core.confine.sandbox`), so
pkb's cache, which candidates load builds from, is not its to write. It must still read
everything already there (the CUDA builds other solutions share, the precompiled headers every
``main.cpp`` loads) and add what it builds, in the place the backend looks for it. So the
builder sees the cache through an overlay file system mounted in its own mount namespace
(:func:`mount_overlay`): the cache itself is the lower layer, read-only; the upper layer is a
folder the compile phase made for this build alone (:mod:`pkb_core.compile.output`), where every
write lands. Nothing the builder does reaches the cache; the phase publishes what is new there,
checked, once the build's processes have ended.

The upper layer's folders are the build's user's, sticky (``01755``), so in the merged view
the builder adds entries and removes or renames none of those already in the cache. Needs
``CAP_SYS_ADMIN`` and the overlay file system; where the mount fails the cache stays read-only
to the builder (its builds then go to its temporary folder and are not kept) and the gap is
reported.
"""
from __future__ import annotations

import ctypes
import os

from pkb_core.process.mount_flags import MS_NODEV, MS_NOSUID

#: The layers inside a build's output folder (the upper must be empty at the start; the work
#: folder is the overlay's own, on the same file system).
UPPER, WORK = "upper", "work"


def _escaped(path: str) -> str:
    """``path`` as an overlay mount option takes it (``,`` ``:`` and ``\\`` escaped)."""
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def mount_overlay(libc, folder: str, output: str) -> str | None:
    """Show ``folder`` as itself (read-only) with ``output``'s upper layer over it, in this
    process's mount namespace; why not, or None. Call inside
    :func:`pkb_core.confine.sandbox.private_mounts`, before the user switch."""
    folder = os.path.realpath(str(folder))
    upper, work = os.path.join(output, UPPER), os.path.join(output, WORK)
    options = f"lowerdir={_escaped(folder)},upperdir={_escaped(upper)},workdir={_escaped(work)}"
    if libc.mount(b"overlay", folder.encode(), b"overlay", MS_NOSUID | MS_NODEV, options.encode()) != 0:
        return (f"pkb's cache seen through a layer of the build's own ({os.strerror(ctypes.get_errno())}): "
                "the cache is read-only to the build, and what it builds is not kept")
    return None
