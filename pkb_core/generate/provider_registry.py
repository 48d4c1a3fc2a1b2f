"""The providers a run can use: the built-in OpenAI-compatible one and those plugins
register through ``pkb_register_providers``."""
from __future__ import annotations

from typing import Callable

from pkb_core.errors import PkbError
from pkb_core.generate import openai_provider
from pkb_core.generate.providers import Provider


def provider_factories(pm) -> dict[str, Callable]:
    """``{name: factory}`` of the built-in and the plugins' providers."""
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
