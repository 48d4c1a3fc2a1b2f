"""Clock, power and throttle state of this rank's GPU, read through NVML.

pkb never changes clocks (shared machines); it logs them with every timed
record instead, so a throttled run can be recognised afterwards.
"""
from __future__ import annotations


def read_clocks(device) -> dict:
    """A small dict of this GPU's state, or ``{"nvml": "<why not>"}``."""
    if device.type != "cuda":
        return {}
    try:
        import pynvml
    except ImportError:
        return {"nvml": "nvidia-ml-py not installed"}
    try:
        import torch

        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        uuid = torch.cuda.get_device_properties(index).uuid
        handle = _handle_for(pynvml, str(uuid), index)
        reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
            "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "throttle_reasons": hex(reasons),
        }
    except Exception as exc:  # noqa: BLE001 - logging must never fail a job
        return {"nvml": f"{type(exc).__name__}: {exc}"}


def _handle_for(pynvml, uuid, index):
    """The NVML handle of the GPU torch calls ``index`` (CUDA_VISIBLE_DEVICES may remap)."""
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        nvml_uuid = pynvml.nvmlDeviceGetUUID(handle)
        nvml_uuid = nvml_uuid.decode() if isinstance(nvml_uuid, bytes) else nvml_uuid
        if nvml_uuid.replace("GPU-", "") == uuid.replace("GPU-", ""):
            return handle
    return pynvml.nvmlDeviceGetHandleByIndex(index)
