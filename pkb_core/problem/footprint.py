"""What a job's inputs take per rank, found without spending the memory: built on the meta device.

A job's memory limit follows from the job where the job says how large it is
(:func:`pkb_core.machine.limits.memory_mib`). A problem declares its sizes as
``SIZES`` parameters, whose meaning is its own; what they come to in bytes is
what its ``inputs(ctx)`` builds. :func:`input_bytes` runs ``inputs`` with every
tensor on PyTorch's ``meta`` device (shapes and dtypes, no storage), as
:mod:`pkb_core.problem.describe` runs it offline on CPU, and counts the bytes of
the tensors it returns for each rank. A problem whose inputs read their own
values (a routing count, an ``.item()``) cannot be built so: it gets None, and
its limit follows from the machine alone.
"""
from __future__ import annotations

import functools

#: Fixed seed material: the values do not matter, only the shapes.
FOOTPRINT_SECRET = "pkb-footprint"


@functools.lru_cache(maxsize=256)
def input_bytes(problem_path: str, size: str, world_size: int, dtype: str, params_json: str | None = None) \
        -> int | None:
    """The largest number of bytes of tensors ``inputs(ctx)`` gives one rank, over the ranks of
    ``world_size`` (trial 0), for the problem file ``problem_path`` at ``size`` (``params_json``:
    parameters that override the size's, as JSON) and working dtype ``dtype`` (a torch name or
    pkb's, as :func:`pkb_core.contracts.dtypes.torch_dtype` reads it); None where the inputs
    cannot be built on the meta device. Kept per process (a file's problem is read once)."""
    import json

    import torch

    from pkb_core.contracts.dtypes import torch_dtype
    from pkb_core.problem.contract import read_spec
    from pkb_core.problem.describe import OfflineContext

    try:
        problem = read_spec(problem_path).load()
        params = json.loads(params_json) if params_json else problem.spec.params(size)
        most = 0
        for rank in range(world_size):
            ctx = OfflineContext(rank=rank, world_size=world_size, device="cpu", dtype=torch_dtype(dtype),
                                 size=size, params=params, trial=0, secret=FOOTPRINT_SECRET,
                                 problem_key=problem.spec.key)
            ctx.device = torch.device("meta")  # the generators stay on CPU: meta has none, and draws nothing
            with torch.no_grad():
                built = problem.inputs(ctx)
            most = max(most, _tensor_bytes(built))
        return most
    except Exception:  # noqa: BLE001 - any failure means "not known": the machine's share decides
        return None


def _tensor_bytes(value) -> int:
    """Bytes of every tensor in ``value`` (nested tuples, lists and dicts)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0
