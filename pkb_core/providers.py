"""Model providers for ``pkb generate``: the contract and the registry.

A provider turns chat messages into a reply. Plugins add providers through
``pkb_register_providers(register)``; pkb registers ``openai``
(:mod:`pkb_core.openai_provider`) itself. :func:`make_provider` builds the one
``--provider`` names, handing its factory the ``[providers.<name>]`` table of
the configuration.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from pkb_core.errors import PkbError


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


def provider_factories(pm) -> dict[str, Callable]:
    """``{name: factory}`` of the built-in and the plugins' providers."""
    from pkb_core import openai_provider

    factories: dict[str, Callable] = {}

    def register(name: str, factory: Callable) -> None:
        if not isinstance(name, str) or not name:
            raise PkbError(f"a provider was registered with the name {name!r}")
        if name in factories:
            raise PkbError(f"provider {name!r} is registered twice")
        if not callable(factory):
            raise PkbError(f"provider {name!r} was registered with a factory that is not callable")
        factories[name] = factory

    register(openai_provider.NAME, openai_provider.from_options)
    pm.hook.pkb_register_providers(register=register)
    return factories


def make_provider(pm, name: str, config: dict) -> Provider:
    """The provider ``name``, built with ``config["providers"][name]``."""
    factories = provider_factories(pm)
    if name not in factories:
        raise PkbError(f"unknown provider {name!r} (choose one of: {', '.join(sorted(factories))})")
    options = dict(config.get("providers", {}).get(name, {}))
    provider = factories[name](options)
    if not callable(getattr(provider, "complete", None)):
        raise PkbError(f"provider {name!r}: its factory returned {type(provider).__name__}, which has no complete()")
    return provider
