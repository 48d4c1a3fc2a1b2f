"""Files a command writes where its user says (``--html FILE``): made with their folders, and a
path that cannot be written is one ``Error:`` line (a missing folder had been a traceback)."""
from __future__ import annotations

from pathlib import Path

from pkb_core.errors import PkbError


def write_output_file(path: Path, text: str, *, option: str) -> None:
    """Write ``text`` into ``path``, making its folders; :class:`PkbError` naming ``option`` and the
    reason where it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise PkbError(f"{option} {path}: cannot write it ({exc.strerror or exc})") from None
