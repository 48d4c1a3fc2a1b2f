"""Building the plugin manager from entry points, one entry point at a time.

Entry-point groups:

* ``pkb.backends``: backend plugins (one per distribution, named after the
  backend);
* ``pkb.problems``: problem packs;
* ``pkb``: anything else (extra commands, observers).

Each plugin is registered under ``<group>:<name>``: pluggy skips a bare name
already taken, so ``cuda`` in two groups would otherwise load once, silently.
A plugin that fails to import is recorded (``pm.load_errors``) and skipped, so
one broken plugin cannot break ``pkb --help``; ``PKB_STRICT_PLUGINS=1`` makes
it fatal instead (for plugin authors).

Switches: ``PKB_DISABLE_PLUGIN_AUTOLOAD=1`` loads no entry points;
``PKB_DISABLED_PLUGINS=group:name,...`` blocks some.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata

import pluggy

from pkb_core.plugin import hookspecs
from pkb_core.errors import PkbError, PluginError

GROUPS = ("pkb.backends", "pkb.problems", "pkb")
BACKEND_GROUP = "pkb.backends"


@dataclass(frozen=True)
class PluginRecord:
    """One loaded (or failed) entry point."""

    key: str
    distribution: str
    version: str
    error: str = ""


class PkbPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers where each plugin came from."""

    def __init__(self):
        super().__init__("pkb")
        self.add_hookspecs(hookspecs)
        self.records: list[PluginRecord] = []

    @property
    def load_errors(self) -> list[PluginRecord]:
        return [r for r in self.records if r.error]


def entry_points(group):
    """(distribution, entry point) pairs of a group, in a stable order."""
    seen = set()
    for dist in metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == group and (ep.name, ep.value) not in seen:
                seen.add((ep.name, ep.value))
                yield dist, ep


def _strict() -> bool:
    return os.environ.get("PKB_STRICT_PLUGINS", "") not in ("", "0")


def load_entry_points(pm: PkbPluginManager, group: str, only: str | None = None) -> None:
    """Register the entry points of ``group`` (just the one named ``only`` if given)."""
    blocked = {b.strip() for b in os.environ.get("PKB_DISABLED_PLUGINS", "").split(",") if b.strip()}
    for dist, ep in entry_points(group):
        key = f"{group}:{ep.name}"
        if (only is not None and ep.name != only) or key in blocked or pm.has_plugin(key):
            continue
        dist_name = dist.metadata["Name"] or "?"
        try:
            register_checked(pm, ep.load(), key)
        except Exception as exc:  # a broken plugin must not take pkb down with it
            if _strict():
                raise PluginError(f"plugin {key} from {dist_name} failed to load: {exc}") from exc
            pm.records.append(PluginRecord(key, dist_name, dist.version, f"{type(exc).__name__}: {exc}"))
            continue
        pm.records.append(PluginRecord(key, dist_name, dist.version))


def register_checked(pm: PkbPluginManager, plugin, name: str | None = None) -> None:
    """Register ``plugin`` and reject it if it implements a hook that does not
    exist (a misspelt ``pkb_backend_complie`` would otherwise never be called)."""
    pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        pm.unregister(plugin)
        raise PluginError(str(exc).splitlines()[0]) from None


def get_plugin_manager(*, backend: str | None = None, extra_plugins=()) -> PkbPluginManager:
    """Build a fresh plugin manager.

    :param backend: in a worker process, the one backend to load from
        ``pkb.backends`` (exactly one backend per process); ``None`` loads all
        backends (the ``pkb`` command's process).
    :param extra_plugins: plugin objects registered after the entry points
        (tests use this for throwaway plugins).
    """
    pm = PkbPluginManager()
    if os.environ.get("PKB_DISABLE_PLUGIN_AUTOLOAD", "") in ("", "0"):
        load_entry_points(pm, BACKEND_GROUP, only=backend)
        load_entry_points(pm, "pkb.problems")
        load_entry_points(pm, "pkb")
    for plugin in extra_plugins:
        register_checked(pm, plugin)
    return pm


def backend_infos(pm) -> dict:
    """``{name: BackendInfo}`` of every loaded backend.

    Two plugins that describe a backend of the same name are an error that
    names both (never a silent winner)."""
    infos, owners = {}, {}
    distributions = {record.key: record.distribution for record in getattr(pm, "records", ())}
    for impl in pm.hook.pkb_backend_info.get_hookimpls():
        info = impl.function()
        if info is None:
            continue
        owner = distributions.get(impl.plugin_name, impl.plugin_name)
        if info.name in infos:
            raise PkbError(f"backend {info.name!r} is provided twice: by {owners[info.name]} and by {owner} "
                           f"(uninstall one, or set PKB_DISABLED_PLUGINS)")
        infos[info.name], owners[info.name] = info, owner
    return infos


def get_backend_info(pm, name: str, device: str | None = None):
    """The BackendInfo called ``name``, or a one-line error listing the choices.

    :param device: where it must run (``cuda``/``cpu``): a backend that cannot run there is
        a one-line error saying what it lacks. None: no such check (jobs that run elsewhere)."""
    infos = backend_infos(pm)
    if name not in infos:
        import difflib

        choices = ", ".join(sorted(infos)) or "none installed"
        close = difflib.get_close_matches(name, list(infos), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise PkbError(f"unknown backend {name!r} ({hint}choose one of: {choices})", about=("backend",))
    missing = infos[name].unavailable_reason(device) if device is not None else None
    if missing:
        raise PkbError(missing)
    return infos[name]
