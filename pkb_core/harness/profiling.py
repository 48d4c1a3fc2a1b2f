"""``--profile``: torch.profiler traces of a few calls, per rank, in Chrome format."""
from __future__ import annotations

from pathlib import Path

import torch


def profile_calls(fn, *, device, calls: int, trace_path: Path) -> list[dict]:
    """Profile ``calls`` calls of ``fn``; write the trace; return the top kernels/ops.

    Each entry: ``name``, ``count``, ``total_us`` (device time on GPU, CPU time
    on CPU). NCCL kernels (``ncclDevKernel*``) show up here by name.
    """
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    rows = []
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", 0) if device.type == "cuda" else event.cpu_time_total
        if total > 0 and (device.type != "cuda" or getattr(event, "device_time_total", 0) > 0):
            rows.append({"name": event.key, "count": event.count, "total_us": round(total, 3)})
    rows.sort(key=lambda r: -r["total_us"])
    return rows[:15]
