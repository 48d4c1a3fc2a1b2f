"""The backend a solution file declares: a module constant ``BACKEND = "triton"``.

A solution is written for one backend (its kernels are Triton, CUDA, ...), and
judged as another's it may pass for the wrong reasons (the ``reference``
backend allows NCCL). A file states its backend with a top-level assignment of
a string literal::

    BACKEND = "triton"

It is read with :mod:`ast`, never by importing the file (nothing of it runs
here). A file that does not parse (a model's most common slip) declares what a
line of its own says, ``BACKEND = "name"`` from its first column
(:data:`DECLARATION_LINE`), so that it goes to its backend and is answered
``compile-error`` there (read as declaring nothing, it made ``pkb submit`` refuse
its whole batch). ``pkb submit`` takes each file's backend from it
(docs/serve.md); the constant is an ordinary module global when the solution runs.
"""
from __future__ import annotations

import ast
import re

#: The module constant that names a solution's backend.
DECLARATION = "BACKEND"


#: A declaration on a line of its own from the first column (what a file that does not parse is read by).
DECLARATION_LINE = re.compile(r"""^BACKEND\s*(?::\s*str\s*)?=\s*(["'])([\w.-]+)\1\s*(?:#.*)?$""", re.M)


def declared_backend(source: str) -> str | None:
    """The backend ``source`` declares (the last top-level ``BACKEND = "name"``), or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte in the text
        lines = DECLARATION_LINE.findall(source.replace("\0", ""))
        return lines[-1][1] if lines else None
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if (any(isinstance(t, ast.Name) and t.id == DECLARATION for t in targets)
                and isinstance(value, ast.Constant) and isinstance(value.value, str)):
            found = value.value
    return found
