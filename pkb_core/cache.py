"""Where pkb keeps what it measures and builds once (calibration, build outcomes, backends' builds).

``$PKB_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/pkb`` when that is set, else
``~/.cache/pkb`` (the XDG base-directory default). Backends put their own caches
in a folder of it named after themselves (``cache_dir() / "cuda"``); pkb's own folders
are named here, once: :func:`calibration_dir`, :func:`builds_dir` and :func:`pch_dir`.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The root of pkb's cache (not created here)."""
    own = os.environ.get("PKB_CACHE_DIR")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():  # the spec says to ignore a relative path
        return Path(xdg) / "pkb"
    return Path.home() / ".cache" / "pkb"


def calibration_dir() -> Path:
    """The machine's measured ceilings and noise floor (:mod:`pkb_core.machine.calibrate`)."""
    return cache_dir() / "calibration"


def builds_dir() -> Path:
    """The compile phase's outcomes, by content (:mod:`pkb_core.compile.phase`)."""
    return cache_dir() / "builds"


def pch_dir() -> Path:
    """Precompiled headers, by compiler, flags and header (:mod:`pkb_core.compile.pch`)."""
    return cache_dir() / "pch"


#: The judge's Triton cache's folder in pkb's cache (:func:`judge_triton_dir`).
JUDGE_TRITON = "triton-judge"


def judge_triton_dir() -> Path:
    """The judge's Triton cache: pkb's own kernels (the keystream a masked set is unmasked with), as
    compiled by the judge, and what every candidate group's own Triton cache starts with
    (:mod:`pkb_core.launch.scratch`), so that a side loads them instead of compiling them again.
    No build publishes into it (:data:`pkb_core.compile.output.PKB_OWN`): what is there is the
    judge's alone."""
    return cache_dir() / JUDGE_TRITON
