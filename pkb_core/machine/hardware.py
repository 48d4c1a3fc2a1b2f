"""The machine a generated solution will run on, described for a prompt.

``--hardware auto`` describes the GPUs of this machine (torch.cuda, plus
``nvidia-smi topo -m`` for the link topology when nvidia-smi is on the PATH);
without a GPU (or with ``PKB_DEVICE=cpu``) it falls back to
:data:`FALLBACK_PRESET` and says so. Any other
value names a preset of :data:`PRESETS`: a node (or NVLink domain) whose
GPUs are all joined by NVLink. Figures are the vendors' published numbers for
the SXM parts: NVLink bandwidth counts both directions together, as the data
sheets do.

This module imports no torch at module level.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from pkb_core.errors import PkbError


@dataclass(frozen=True)
class Hardware:
    """One multi-GPU machine as a prompt describes it.

    :param key: what ``--hardware`` takes (``"h100_8"``), or ``"auto"``.
    :param gpus: GPUs in the NVLink domain (the largest world size).
    :param gpu: the GPU's name.
    :param details: per-GPU facts: memory, SMs, compute capability, bandwidths.
    :param interconnect: how the GPUs are joined.
    :param note: anything the reader must know (e.g. "preset, not detected").
    """

    key: str
    gpus: int
    gpu: str
    details: str
    interconnect: str
    note: str = ""

    def describe(self, world_size: int) -> str:
        """A few lines for the prompt, for a run on ``world_size`` of the GPUs."""
        used = "all of them" if world_size == self.gpus else f"{world_size} of them"
        lines = [f"- {self.gpus} x {self.gpu}; the solution runs on {used} (one rank per GPU).",
                 f"- Each GPU: {self.details}.",
                 f"- Interconnect: {self.interconnect}"]
        if self.note:
            lines.append(f"- Note: {self.note}")
        return "\n".join(lines)


_HOPPER = "132 SMs, compute capability 9.0 (sm_90a), 50 MB L2"
_NVSWITCH_4 = ("NVLink 4 through NVSwitch: every GPU reaches every other GPU directly at 900 GB/s "
               "(both directions together; 450 GB/s each way), 18 links per GPU. Peer memory is "
               "read and written with ordinary loads and stores once mapped.")

#: ``--hardware`` presets. Add one by giving the published figures.
PRESETS = {
    "a100_8": Hardware(
        "a100_8", 8, "NVIDIA A100-SXM4-80GB",
        "80 GB HBM2e at 2.0 TB/s, 108 SMs, compute capability 8.0 (sm_80), 40 MB L2",
        "NVLink 3 through NVSwitch: all-to-all, 600 GB/s per GPU (both directions together), 12 links."),
    "h100_8": Hardware(
        "h100_8", 8, "NVIDIA H100 80GB HBM3 (SXM5)", f"80 GB HBM3 at 3.35 TB/s, {_HOPPER}", _NVSWITCH_4),
    "h200_2": Hardware(
        "h200_2", 2, "NVIDIA H200 (SXM, 141 GB)", f"141 GB HBM3e at 4.8 TB/s, {_HOPPER}",
        "NVLink 4, 18 links joining the two GPUs directly (nvidia-smi topo: NV18): 900 GB/s between "
        "them (both directions together; 450 GB/s each way)."),
    "h200_8": Hardware(
        "h200_8", 8, "NVIDIA H200 (SXM, 141 GB)", f"141 GB HBM3e at 4.8 TB/s, {_HOPPER}", _NVSWITCH_4),
    "b200_8": Hardware(
        "b200_8", 8, "NVIDIA B200 (HGX B200, 180 GB)",
        "180 GB HBM3e at 8 TB/s, 148 SMs, compute capability 10.0 (sm_100a)",
        "NVLink 5 through NVSwitch: all-to-all, 1.8 TB/s per GPU (both directions together; 900 GB/s "
        "each way), 18 links."),
    "b200_72": Hardware(
        "b200_72", 72, "NVIDIA Blackwell GPU of a GB200 NVL72 rack (186 GB)",
        "186 GB HBM3e at 8 TB/s, 148 SMs, compute capability 10.0 (sm_100a); two GPUs share a Grace CPU",
        "NVLink 5 through the rack's NVLink Switch trays: one NVLink domain of 72 GPUs across 18 compute "
        "trays, every GPU reaches every other at 1.8 TB/s (both directions together; 900 GB/s each way)."),
}

#: What ``auto`` describes on a machine without a GPU.
FALLBACK_PRESET = "h100_8"


def hardware_choices() -> list[str]:
    return ["auto", *PRESETS]


def resolve_hardware(choice: str) -> Hardware:
    """The :class:`Hardware` for ``--hardware`` (``auto`` or a preset key)."""
    if choice == "auto":
        return detect_hardware()
    if choice not in PRESETS:
        raise PkbError(f"unknown hardware {choice!r} (choose auto or one of: {', '.join(PRESETS)})")
    return PRESETS[choice]


def detect_hardware() -> Hardware:
    """This machine's GPUs, or the fallback preset (with a note saying so)."""
    import torch

    from pkb_core.machine.device import detect_device

    if detect_device("auto") != "cuda":  # no GPU, or PKB_DEVICE=cpu (as for pkb run)
        preset = PRESETS[FALLBACK_PRESET]
        return Hardware(preset.key, preset.gpus, preset.gpu, preset.details, preset.interconnect,
                        f"no GPU on the machine that wrote this prompt: preset {FALLBACK_PRESET} assumed")
    count = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    details = (f"{props.total_memory / 2**30:.0f} GiB memory, {props.multi_processor_count} SMs, "
               f"compute capability {props.major}.{props.minor} (sm_{props.major}{props.minor})")
    return Hardware("auto", count, props.name, details, _topology(count))


def _topology(count: int) -> str:
    """``nvidia-smi topo -m`` (the link type between each pair), when available."""
    if count < 2:
        return "a single GPU: nothing to communicate with."
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown (nvidia-smi is not on the PATH)."
    try:
        out = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown (nvidia-smi topo -m failed: {type(exc).__name__})."
    # nvidia-smi prints a legend after the matrix; the matrix is what matters.
    matrix = []
    for line in out.splitlines():
        if line.strip().startswith("Legend"):
            break
        if line.strip():
            matrix.append(line.rstrip())
    matrix = "\n".join(matrix)
    return ("`nvidia-smi topo -m` (NV<n> = joined by n NVLinks; PIX/PXB/PHB/NODE/SYS = PCIe or CPU "
            f"paths only):\n```\n{matrix}\n```")
