"""The late rank's reads held in Triton's interpreter (CPU mode), as pkb's staggered trials ask
(:mod:`pkb_core.candidate.late_reads`): every interpreted atomic operation and read of a kernel
tells the gate first. A no-op outside a staggered trial's late call (the gate is disarmed)."""
from __future__ import annotations

_INSTALLED = False

#: The interpreter builder's operations that read memory, and those that are atomic.
READS = ("create_load", "create_masked_load", "create_tensor_pointer_load", "create_descriptor_load")
ATOMICS = ("create_atomic_cas", "create_atomic_rmw")


def install() -> None:
    """Wrap the interpreter's reads and atomics (once a process; interpreter mode only). Where
    the interpreter is not the one this was written against, nothing is wrapped: the late start
    alone staggers the trial."""
    global _INSTALLED
    if _INSTALLED:
        return
    try:
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:
        return
    from pkb_core import LATE_READS

    def told(operation, tell):
        def run(self, *args, **kwargs):
            tell()
            return operation(self, *args, **kwargs)

        return run

    for names, tell in ((READS, LATE_READS.reading), (ATOMICS, LATE_READS.synchronising)):
        for name in names:
            operation = getattr(InterpreterBuilder, name, None)
            if operation is not None:
                setattr(InterpreterBuilder, name, told(operation, tell))
    _INSTALLED = True
