"""A machine's measured ceilings (``pkb calibrate``), as cached and as the physics floor reads them.

Measured by :mod:`pkb_core.machine.calibrate`, cached as :meth:`Calibration.to_json`
in ``<cache>/calibration/<machine>.json``, handed to the launcher (and to other
nodes) inside :class:`pkb_core.contracts.batch.LaunchSettings`, read by
:func:`pkb_core.machine.roofline.speed_of_light`. Read leniently: a cache
file written by another pkb version keeps its unknown fields.
"""
from __future__ import annotations

import attrs

from pkb_core.contracts.serial import Contract, optional


@attrs.frozen(kw_only=True)
class Link(Contract):
    """One ordered pair of GPUs: a 256 MiB copy's rate, issued by the source (write) or the destination (read)."""

    src: int
    dst: int
    issued_by: str
    gbps: float


@attrs.frozen(kw_only=True)
class Calibration(Contract):
    """This machine's ceilings, each measured here (none is a datasheet constant)."""

    UNKNOWN = "keep"

    #: The best peer link rate (GB/s); on CPU the memory copy rate (shared-memory "links" are copies).
    link_gbps: float
    links: tuple[Link, ...] = ()
    #: Local memory rate, bytes read + written (GB/s).
    hbm_gbps: float
    #: Matmul rate (TFLOP/s) in ``matmul_dtype``.
    matmul_tflops: float
    matmul_dtype: str
    #: How the numbers were taken, in words.
    method: str
    machine: str = ""
    device: str = ""
    torch: str = ""
    datetime: str = ""
    #: The reference timed against itself (:mod:`pkb_core.launch.noise`), once measured.
    noise_floor: dict | None = optional()
    extra: dict = attrs.field(factory=dict)
