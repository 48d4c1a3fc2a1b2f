"""Measuring this machine's ceilings: link, memory and matmul rates (``pkb calibrate``).

On GPU: peer-to-peer copy bandwidth for every ordered pair of local GPUs,
issued from the source (a push, "write") and from the destination (a pull,
"read"), 256 MiB per copy; local HBM copy bandwidth (bytes read + written);
bf16 matmul rate at 8192^3. On CPU: memory copy bandwidth (which is also what
the shared-memory "links" run at) and the fp32 matmul rate.

Results are cached per machine in ``<cache>/calibration/`` (the cache is
``$PKB_CACHE_DIR``, else ``$XDG_CACHE_HOME/pkb``, else ``~/.cache/pkb``: :mod:`pkb_core.cache`) and reused by the physics floor and speed-of-light figures;
nothing here is a datasheet constant. ``pkb calibrate`` also measures the
*noise floor* (:mod:`pkb_core.launch.noise`: the reference timed against
itself) and caches it in the same file under ``noise_floor``.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time
from pathlib import Path

import torch

from pkb_core.cache import calibration_dir
from pkb_core.contracts.calibration import Calibration, Link
from pkb_core.errors import PkbError


def machine_key(device: str) -> str:
    name = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"
    count = torch.cuda.device_count() if device == "cuda" else os.cpu_count()
    return f"{platform.node()}-{device}-{count}x-{name}".replace(" ", "_").replace("/", "_")


def cache_path(device: str) -> Path:
    return calibration_dir() / f"{machine_key(device)}.json"


def load_calibration(device: str) -> Calibration | None:
    """This machine's cached calibration; None when there is none, or when the file
    is not one (it is measured again)."""
    path = cache_path(device)
    if not path.exists():
        return None
    try:
        return Calibration.from_json(json.loads(path.read_text()))
    except (ValueError, PkbError):
        return None


def save_calibration(device: str, result: Calibration) -> Path:
    """Write ``result`` as this machine's cached calibration."""
    path = cache_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(), indent=2))
    return path


def calibrate(device: str, force: bool = False) -> Calibration:
    """Measure (or load from the cache) this machine's ceilings."""
    if not force:
        cached = load_calibration(device)
        if cached:
            return cached
    result = _measure_cuda() if device == "cuda" else _measure_cpu()
    result = Calibration(**result, machine=machine_key(device), device=device, torch=torch.__version__,
                         datetime=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    save_calibration(device, result)
    return result


def _cuda_time(fn, repeats, device) -> float:
    """The fewest seconds of ``fn`` on ``device``'s current stream over ``repeats`` runs.

    The fastest run, not the median: the rates set the physics floor, which must
    never lie above what the machine can do (an honest solution would be flagged).
    Load from other processes only ever slows a run, so the fastest is the least
    disturbed (docs/trust.md, "no false flags under load")."""
    with torch.cuda.device(device):
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
    return min(samples)


def _measure_cuda() -> dict:
    n = torch.cuda.device_count()
    size = 256 << 20
    buffers = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}").fill_(i) for i in range(n)]
    links = []
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            dst_buf = torch.empty_like(buffers[dst])
            for issuer, kind in ((src, "write"), (dst, "read")):
                seconds = _cuda_time(lambda: dst_buf.copy_(buffers[src], non_blocking=True), 10, issuer)
                links.append(Link(src=src, dst=dst, issued_by=kind, gbps=size / seconds / 1e9))
    hbm_src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
    hbm_dst = torch.empty_like(hbm_src)
    hbm_s = _cuda_time(lambda: hbm_dst.copy_(hbm_src), 10, 0)
    m = 8192
    a = torch.randn(m, m, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda:0", dtype=torch.bfloat16)
    mm_s = _cuda_time(lambda: a @ b, 10, 0)
    return {
        "link_gbps": max((link.gbps for link in links), default=0.0),
        "links": links,
        "hbm_gbps": 2 * hbm_src.numel() / hbm_s / 1e9,
        "matmul_tflops": 2 * m ** 3 / mm_s / 1e12,
        "matmul_dtype": "bf16",
        "method": "peer copies of 256 MiB (copy engine), 1 GiB local copy, 8192^3 bf16 matmul; fastest of 10",
    }


def _measure_cpu() -> dict:
    def fastest_seconds(fn, repeats):  # the fastest run: see _cuda_time
        fn()
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return min(samples)

    src = torch.ones(64 << 20, dtype=torch.uint8)
    dst = torch.empty_like(src)
    copy_s = fastest_seconds(lambda: dst.copy_(src), 10)
    m = 512
    a, b = torch.randn(m, m), torch.randn(m, m)
    mm_s = fastest_seconds(lambda: a @ b, 10)
    bandwidth = 2 * src.numel() / copy_s / 1e9
    return {
        "link_gbps": bandwidth,  # shared-memory "links" are memory copies
        "links": (),
        "hbm_gbps": bandwidth,
        "matmul_tflops": 2 * m ** 3 / mm_s / 1e12,
        "matmul_dtype": "fp32",
        "method": "64 MiB memory copy (read + write), 512^3 fp32 matmul; fastest of 10",
    }
