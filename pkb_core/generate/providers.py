"""Model providers for ``pkb generate``: the contract.

A provider turns chat messages into a reply. Plugins add providers through
``pkb_register_providers(register)``; pkb registers ``openai``
(:mod:`pkb_core.generate.openai_provider`) itself;
:mod:`pkb_core.generate.provider_registry` builds the one ``--provider`` names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol



@dataclass(frozen=True)
class ModelSettings:
    """What ``pkb generate`` asks of the model; ``None`` leaves the provider's default."""

    model: str
    temperature: Optional[float] = None
    max_tokens: Optional[int] = None


@dataclass(frozen=True)
class Completion:
    """A model's reply.

    :param text: the reply's text (``""`` when the model said nothing).
    :param model: the model that answered, as the provider reports it.
    :param finish_reason: why generation stopped (``"stop"``, ``"length"``, ...), if known.
    :param usage: token counts as the provider reports them.
    :param details: anything else worth recording (response id, attempts, ...).
    """

    text: str
    model: str = ""
    finish_reason: Optional[str] = None
    usage: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)


class Provider(Protocol):
    """What a provider factory returns."""

    def complete(self, messages: list, settings: ModelSettings) -> Completion:
        """The reply to ``messages``; raises :class:`PkbError` (one line) on failure."""
