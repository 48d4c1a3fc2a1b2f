"""The settings a generated file will be judged under, resolved once for the prompt and the check.

A prompt describes the inputs at a world size, a working dtype and a size preset;
the file is then checked by ``pkb run`` (or the refinement loop's evaluator) at
settings of its own. Both come from one :class:`Judging`, resolved by
:func:`resolve_judging` the way ``pkb run`` resolves its options:

* the device: ``auto`` is this machine's (its GPUs, else CPU mode; ``PKB_DEVICE``
  as for ``pkb run``), or the reward service's when the loop checks through one;
* ``auto`` dtype and size: :func:`pkb_core.launch.plan.device_defaults` (bf16 and
  the default size on GPUs, fp32 and ``tiny`` in CPU mode), the function ``pkb run``
  and the evaluators use;
* the world size: every GPU where it is judged, at most as many as the described
  machine (``--hardware``) has; 2 in CPU mode, ``pkb run``'s default there.

The prompt states them (``${judging}`` of the template, and the inputs' shapes at
them); ``pkb generate`` ends by naming the ``pkb run`` options that judge the files
the same way (:meth:`Judging.run_options`); ``pkb generate --rounds`` checks with them.
"""
from __future__ import annotations

from dataclasses import dataclass

#: The ranks of a CPU-mode run when not given (``pkb run --nproc``'s default there).
CPU_WORLD_SIZE = 2


@dataclass(frozen=True)
class Judging:
    """Where and how a generated file is checked: ``device`` (``cuda`` or ``cpu``),
    ``world_size``, ``precision`` (``bf16``, ``fp16``, ``fp32``) and ``size`` (a preset)."""

    device: str
    world_size: int
    precision: str
    size: str

    def sentence(self) -> str:
        """What the prompt says about it (the template's ``${judging}``)."""
        from pkb_core.contracts.dtypes import TORCH_NAMES

        how = f"{self.world_size} ranks, size `{self.size}`, working dtype {TORCH_NAMES[self.precision]}"
        if self.device == "cuda":
            return f"pkb will judge this file on GPUs: {how}, one rank per GPU."
        return (f"pkb will judge this file in its CPU mode, on a machine without a GPU: {how}, each rank a "
                "process whose tensors are on the CPU; torch.distributed runs over gloo, the symmetric heap is "
                "shared memory that every rank maps, and Triton kernels run in Triton's interpreter. The same "
                "file must run unchanged on GPUs.")

    def run_options(self) -> str:
        """The ``pkb run`` options that judge a file the same way."""
        return f"--nproc {self.world_size} --size {self.size} --dtype {self.precision}"


def resolve_judging(hardware, *, device: str = "auto", nproc: int | None = None, precision: str = "auto",
                    size: str = "auto", gpus: int | None = None) -> Judging:
    """The :class:`Judging` of these options (``auto`` resolved; see the module docstring).

    :param hardware: the machine the prompt describes (:class:`pkb_core.machine.hardware.Hardware`):
        the largest world size.
    :param gpus: the GPUs where the file is judged when that is not this machine (the
        reward service's count); None: this machine's.
    """
    from pkb_core.launch.plan import device_defaults
    from pkb_core.machine.device import detect_device, device_count

    device = detect_device(device)
    size, precision = device_defaults(device, size, precision)
    if nproc is None:
        if device == "cuda":
            here = device_count(device) if gpus is None else gpus
            # No GPU visible (a prompt written here for a GPU machine): the described machine's count.
            nproc = min(hardware.gpus, here) if here else hardware.gpus
        else:
            nproc = min(hardware.gpus, CPU_WORLD_SIZE)
    return Judging(device=device, world_size=nproc, precision=precision, size=size)
