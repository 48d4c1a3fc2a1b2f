"""Extensions bound through torch's dispatcher: ``pkb_cuda.compile(..., bind="ops")``.

load_inline's bindings are a pybind11 module, and pybind11's tensor casters
come with ``torch/extension.h``, whose parsing is most of a ``main.cpp``'s
build (17 s on a 2-core box, 23 s on the GPU machine; 11 s and 7.5 s with
pkb's precompiled header, which itself takes 33-37 s to build once). With
``bind="ops"`` ``main.cpp`` starts with ``<torch/library.h>`` instead and
registers each bound function with ``TORCH_LIBRARY(<module>, m) { m.def("f",
&f); }`` (:func:`pkb_cuda.sources.bindings`): about 5 s, with no PCH to wait
for. The functions' C++ types must be ones torch can infer a schema from
(``at::Tensor``, ``int64_t``, ``double``, ``bool``, ``std::vector<at::Tensor>``,
``std::optional``...; not ``int`` or ``float``), and ``cpp_source`` includes
the ATen headers it uses (``<ATen/ops/empty_like.h>`` for ``at::empty_like``).

The library is loaded with ``torch.ops.load_library``; the object returned in
place of a module (:class:`OpsModule`) has one attribute per bound function,
``torch.ops.<module>.<f>``, called like pybind11's: tensors and Python ints.
"""
from __future__ import annotations

from pathlib import Path


class OpsModule:
    """The bound functions of an ``ops`` extension: ``ext.f(...)`` calls ``torch.ops.<namespace>.f``."""

    def __init__(self, namespace: str, functions, path):
        import torch

        ops = getattr(torch.ops, namespace)
        for function in functions:
            setattr(self, function, getattr(ops, function))
        self.__name__ = namespace
        self.__file__ = str(path)

    def __repr__(self) -> str:
        return f"<pkb_cuda ops extension {self.__name__} from {self.__file__}>"


def load(namespace: str, functions, path: Path) -> OpsModule:
    """Load a built ``ops`` library (registering its functions once per process) and wrap it."""
    import torch

    torch.ops.load_library(str(path))
    return OpsModule(namespace, functions, path)
