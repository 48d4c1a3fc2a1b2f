"""The plugin manager of a process that runs solution code (a candidate's rank, a builder):
exactly one backend, the core's defaults, and the modules the backend serves to solutions."""
from __future__ import annotations

from pkb_core.candidate.solution_modules import provide
from pkb_core.errors import PkbError
from pkb_core.plugin.manager import backend_infos, get_plugin_manager


def worker_plugin_manager(backend: str, defaults):
    """A candidate process's manager: exactly the one backend, plus the core
    defaults (``defaults``, registered as ``pkb_core.candidate.defaults``). The modules
    the backend serves to solution files are declared for this process."""
    pm = get_plugin_manager(backend=backend)
    infos = backend_infos(pm)
    if set(infos) != {backend}:
        raise PkbError(f"worker expected backend {backend!r}, loaded {sorted(infos) or 'none'}")
    provide(infos[backend].solution_modules, infos[backend].unsupported_modules)
    pm.register(defaults, name="pkb_core.candidate.defaults")
    return pm
