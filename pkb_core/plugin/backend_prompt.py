"""What a backend contributes to a generation prompt (``BackendInfo.prompt``).

pkb writes everything about the problem, the inputs, the machine and the
rules itself; a backend adds only what is its own: how solutions for it are
written (its helper API) and worked examples. A backend whose ``BackendInfo`` has no
``prompt`` still gets prompts, with its one-line description as
the only instructions.

This module imports nothing heavy: backend plugins import it at load time.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromptExample:
    """One in-context pair: a problem's reference and a solution to it for the backend.

    :param problem: the problem's id or ``<id>_<name>`` key (``"1"``, ``"1_allreduce"``).
    :param solution: the full source of a solution file for that problem (read
        it from your samples directory, so the example is a file that passes).
    :param reference: the problem's reference source; leave empty and pkb reads
        the registered problem file (set it for a problem outside the registry).
    :param notes: a sentence or two on what the example shows.

    pkb never shows an example for the very problem a prompt asks about: give
    examples for two problems or more so that every problem gets one.
    """

    problem: str
    solution: str
    reference: str = ""
    notes: str = ""


@dataclass(frozen=True)
class BackendPrompt:
    """A backend's part of a prompt.

    :param instructions: how a solution for this backend is written: the file's
        shape, the helper API (signatures and what they return), the
        synchronisation pattern, pitfalls. Markdown.
    :param examples: :class:`PromptExample` pairs, best first.
    """

    instructions: str
    examples: tuple = ()
