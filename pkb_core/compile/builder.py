"""One build of the compile phase: ``python -m pkb_core.compile.builder`` (request on stdin).

The compile phase (:mod:`pkb_core.compile.phase`) runs each solution's build in a
process of its own, before any job starts: the backend's compile hook, with a
:class:`BuildContext` as its state, imports the solution (which builds what it
builds at import: ``load_inline``, ``pkb_cuda.compile``) and may build more
ahead of time (the cuda backend also builds the extensions a solution builds
lazily, where their arguments are known at import). What gets built ends in
the backend's own cache, keyed by content, where the job's candidate finds it.

The solution's code runs here, so the process is locked down like a
candidate's (:mod:`pkb_core.confine.lockdown`: a user of its own, no new network
connections, nothing of the judge's or of other jobs reachable, the run directory
hidden). What it builds lands in its own output folder, seen as pkb's cache
(:mod:`pkb_core.confine.overlay`), and the compile phase publishes it
(:mod:`pkb_core.compile.output`). It needs no GPU and
initialises none. The request (:class:`pkb_core.contracts.build.BuildRequest`) comes
on standard input; the answer (:class:`pkb_core.contracts.build.BuildAnswer`) is the last
JSON line on the reply descriptor, after :class:`pkb_core.contracts.build.SourceChecked`
once the source check passed.
"""
from __future__ import annotations

import json
import os
import sys

from pkb_core.contracts.build import BuildAnswer, BuildRequest, SourceChecked
from pkb_core.contracts.verdict import Verdict
from pkb_core.plugin.backend import BuildContext


def build(request: BuildRequest, announce=lambda message: None) -> BuildAnswer:
    from pkb_core.candidate.defaults import CoreDefaults
    from pkb_core.errors import CompileError, SolutionUnsupported, describe
    from pkb_core.confine.lockdown import protected_caches
    from pkb_core.candidate.plugin_manager import worker_plugin_manager
    from pkb_core.candidate.solution import check_source
    from pkb_core.problem.contract import read_spec

    pm = worker_plugin_manager(request.backend, CoreDefaults())
    problem = read_spec(request.problem_path).load()
    _lock_down(request, protected_caches())
    state = BuildContext(device=request.device, options=request.options)
    try:
        check_source(pm, request.solution, request.device)
        announce(SourceChecked())
        program = pm.hook.pkb_backend_compile(state=state, problem=problem, solution=request.solution)
        if program is None:
            raise CompileError("the backend returned None from pkb_backend_compile")
    except SolutionUnsupported as exc:
        return BuildAnswer(ok=False, message=str(exc), verdict=Verdict.UNSUPPORTED.value)
    except CompileError as exc:
        return BuildAnswer(ok=False, message=str(exc))
    except Exception as exc:  # noqa: BLE001 - a backend bug is still this solution's verdict
        return BuildAnswer(ok=False, message=f"compiling raised {describe(exc, request.solution)}")
    return BuildAnswer(ok=True)


def _lock_down(request: BuildRequest, protected) -> None:
    """The builder's lockdown: the solution's code runs here, so it runs as the build's own user
    (``request.user``, drawn by the compile phase as a candidate group's is), with a file system
    that is read-only but for the build's temporary folder and its output. The temporary folder
    is the compile phase's (``request.scratch``), which removes it when the build ends; here it
    becomes a tmpfs of this process's mount namespace of at most ``request.scratch_bytes``
    (charged to the build's cgroup), so nothing the build writes there reaches the disk or
    outlives its processes. pkb's cache is seen whole through an overlay whose writes land in
    the build's output folder (``request.output``, :mod:`pkb_core.compile.output`): the phase,
    not the builder, publishes what is new there once the build has ended; the calibration
    stays read-only.

    Hidden (seen empty): the run directory, the ``request.hidden`` folders (a service's data
    directory: its queue, every client's sources) and the build outcomes
    (:mod:`pkb_core.compile.outcomes`: other solutions' compiler messages), but for the
    solution's own folder, which stays readable (the backend reads the file, and what sits
    beside it, after the lockdown); the machine's temporary folders and the one the build's
    own was made in, but for what it needs there; and every process of another user
    (:mod:`pkb_core.confine.views`). The solution's text is read first, while this process may
    still read it. Where the launcher is not root (no ``request.user``) the build keeps its
    user and writes pkb's cache itself; what could not be applied is said in its log."""
    from pkb_core.cache import builds_dir, cache_dir
    from pkb_core.candidate.solution import keep_source
    from pkb_core.confine.lockdown import lock_down
    from pkb_core.confine.sandbox import use_scratch

    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    keep_source(request.solution)
    folder = os.path.dirname(os.path.abspath(request.solution))
    readable = [folder, os.path.dirname(os.path.abspath(request.problem_path)), str(root), request.scratch]
    missing = lock_down(network=False, read_only=protected, writable=[request.scratch, str(root)],
                        hidden=[request.run_dir, *request.hidden, str(builds_dir())], revealed=[folder],
                        own_tmpfs=[(request.scratch, request.scratch_bytes)], user=request.user, expose=readable,
                        layered=[(str(root), request.output)] if request.output else (),
                        temp_roots=[os.path.dirname(request.scratch)])
    if request.user is None:
        missing.append("a user of its own (the launcher is not root): the build writes pkb's cache itself")
    if missing:
        print(f"pkb: this build's lockdown lacks: {'; '.join(missing)}", file=sys.stderr, flush=True)
    use_scratch(request.scratch)  # the same temporary, home and cache variables as a candidate's


def _enter_network() -> None:
    """Enter the build's own network namespace, if the phase made one (a spawned builder; a forked
    one entered it as it was forked), and an IPC namespace of its own where the phase says so:
    before the request, so before the solution's code."""
    from pkb_core.process.ipcns import OWN_IPC_ENV, own_ipc_namespace
    from pkb_core.process.netns import NETNS_FD_ENV, enter

    fd = os.environ.pop(NETNS_FD_ENV, None)
    if fd is not None:
        try:
            enter(int(fd))
        except OSError as exc:
            print(f"pkb: {exc}", file=sys.stderr, flush=True)
        os.close(int(fd))
    if os.environ.pop(OWN_IPC_ENV, None):
        try:
            own_ipc_namespace()
        except OSError as exc:
            print(f"pkb: {exc}", file=sys.stderr, flush=True)


def main() -> int:
    from pkb_core.plugin.preload import import_torch_after_preloads
    from pkb_core.process.log_cap import cap_output
    from pkb_core.process.sessions import die_with_spawner

    die_with_spawner()  # a spawned builder dies with the phase that started it (a forked one: with its zygote)
    _enter_network()
    import_torch_after_preloads()
    request = BuildRequest.from_json(json.loads(sys.stdin.read()))
    if request.log_cap:
        cap_output(request.log_cap)  # before the solution's code: what it prints is capped
    reply = os.fdopen(int(os.environ["PKB_REPLY_FD"]), "w")

    def announce(message):
        reply.write(json.dumps(message.to_json()) + "\n")
        reply.flush()

    announce(build(request, announce))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
