"""The launch's two kinds of fork server (pkb_core.launch.zygote): the judge's zygote has the
launcher's environment, the candidates' an allow-listed one, and neither forks the other's
children, so what the judge is handed never lies in memory a candidate is forked from."""
from __future__ import annotations

import os
import time

import pytest

from pkb_core.contracts.fork import ForkRequest
from pkb_core.contracts.outcome import JobEnded
from pkb_core.launch.zygote import JUDGE
from pkb_core.launch.zygotes import _Zygote


@pytest.mark.parametrize("kind, role", [(JUDGE, "candidate"), ("reference", "judge")])
def test_a_zygote_refuses_the_other_kinds_child(tmp_path, kind, role):
    with open(tmp_path / "zygote.log", "ab") as log:
        zygote = _Zygote(kind, dict(os.environ, PYTHONUNBUFFERED="1"), log)
        read, write = os.pipe()
        try:
            with pytest.raises(JobEnded, match="exited with status 1"):
                zygote.fork(ForkRequest(role=role, fds=["stdin"]), [read], time.monotonic() + 120)
        finally:
            os.close(read)
            os.close(write)
            zygote.stop()
    assert f"a {kind} zygote was asked for a {role}" in (tmp_path / "zygote.log").read_text()
