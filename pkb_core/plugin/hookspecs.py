"""Every pkb hook. The docstrings here are the reference documentation.

Plugins implement hooks with :data:`hookimpl`::

    from pkb_core import hookimpl

    @hookimpl
    def pkb_backend_launch(state, program, inputs):
        return lambda: program(*inputs)

Two kinds of hooks exist:

* **Registration hooks** run in the ``pkb`` command's own process, in every
  loaded plugin (backends, problem packs and ``pkb`` plugins alike).
* **Lifecycle hooks** run on every rank of a worker launch. Exactly one backend
  plugin is registered in a worker process, so each ``firstresult`` lifecycle
  hook has one answer. Core defaults (``pkb_core.candidate.defaults``) are registered
  ``trylast`` and stand in where a backend implements nothing.

No hook runs inside a timed loop: :func:`pkb_backend_launch` returns a
zero-argument callable and the harness calls that directly (a pluggy dispatch
costs microseconds, as much as a small NVLink kernel).

To evolve a hook, add keyword arguments; never rename one. An implementation
may accept fewer arguments than the spec.

This module imports nothing heavy (no torch): it is loaded by ``pkb --help``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import pluggy

if TYPE_CHECKING:  # the types only: importing them here would load torch for `pkb --help`
    from pathlib import Path

    import click
    import torch

    from pkb_core.contracts.build import BuildResult
    from pkb_core.contracts.record import Record
    from pkb_core.plugin.backend import BackendInfo, BuildContext, WorkerContext
    from pkb_core.problem.contract import Problem
    from pkb_core.plugin.reporter import Reporter

hookspec = pluggy.HookspecMarker("pkb")
hookimpl = pluggy.HookimplMarker("pkb")

# ---------------------------------------------------------------------------
# Registration hooks (the pkb command's process, all implementations run)
# ---------------------------------------------------------------------------


@hookspec
def pkb_backend_info() -> Optional[BackendInfo]:
    """Describe the backend this plugin provides.

    :return: a :class:`pkb_core.BackendInfo` (name, devices it runs on,
        a requirement check that names what is missing, where its sample
        solutions live), or ``None`` for plugins that are not backends.

    Called in the ``pkb`` command's process for every loaded plugin; must not
    import the backend's heavy runtime (do that in the requirement check).

    Example::

        @hookimpl
        def pkb_backend_info() -> Optional[BackendInfo]:
            return BackendInfo(name="mybackend", devices=("cuda",),
                               requirements=lambda device: None)
    """


@hookspec
def pkb_register_problems(register: Callable[[Path], None]) -> None:
    """Add problem files to the registry.

    :param register: ``register(path)`` takes a problem file or a directory that
        is searched recursively for ``<id>_<name>.py`` files.

    Called in the ``pkb`` command's process and in each worker (to resolve the
    problems of a launch). Example::

        @hookimpl
        def pkb_register_problems(register: Callable[[Path], None]) -> None:
            register(pathlib.Path(__file__).parent / "problems")
    """


@hookspec
def pkb_register_commands(cli: click.Group) -> None:
    """Add commands to the ``pkb`` click group.

    :param cli: the ``click.Group`` of the ``pkb`` command. Example::

        @hookimpl
        def pkb_register_commands(cli: click.Group) -> None:
            @cli.command()
            def hello():
                click.echo("hello")
    """


@hookspec
def pkb_register_providers(register: Callable[[str, Callable[[dict], Any]], None]) -> None:
    """Add model providers for ``pkb generate --provider NAME``.

    :param register: ``register(name, factory)``. ``factory(options)`` is
        called once per ``pkb generate`` with the ``[providers.<name>]`` table
        of the pkb configuration (a dict, empty when absent) and returns an
        object with ``complete(messages, settings)``: ``messages`` is a list of
        ``{"role": "system" | "user", "content": str}``, ``settings`` a
        :class:`pkb_core.generate.providers.ModelSettings` (``model``, ``temperature``,
        ``max_tokens``, ``None`` meaning the provider's default). It returns a
        :class:`pkb_core.generate.providers.Completion` and raises
        :class:`pkb_core.errors.PkbError` with one line on failure (after its
        own retries). A factory raises ``PkbError`` for missing credentials.

    Called in the ``pkb`` command's process. pkb registers ``openai`` itself
    (any server speaking the OpenAI chat-completions protocol); a name
    registered twice is an error. Example::

        @hookimpl
        def pkb_register_providers(register: Callable[[str, Callable[[dict], Any]], None]) -> None:
            register("echo", lambda options: EchoProvider(**options))
    """


# ---------------------------------------------------------------------------
# Report hooks (the process that writes records, all implementations run)
# ---------------------------------------------------------------------------


@hookspec
def pkb_report_job(record: Record, reporter: Reporter) -> None:
    """A job's record, just written to the run directory.

    :param record: the :class:`pkb_core.Record` (one per job: its verdict,
        reason, timing), exactly as ``records.jsonl`` holds it.
    :param reporter: the run's :class:`pkb_core.Reporter`; call
        ``reporter.stop(reason)`` to have the run start no further job (the
        job that is running finishes and keeps its record).

    Called once per job in the process that writes records, however the job
    came in (``pkb run``, ``pkb bench``, ``pkb calibrate``'s noise floor,
    :func:`pkb_core.evaluate`, ``pkb generate --rounds``, ``pkb serve``: each
    reports through its session, :mod:`pkb_core.launch.session`), in the order
    jobs finish: for jobs the compile phase refused, for world sizes a problem
    refuses, for every job a launch ran, and, with ``--executor slurm``, for
    each record a shard writes, as the submitting process reads it back (the
    service likewise for each record its lanes send). Observers only: the
    record is written before the hook runs, and what an implementation raises
    ends the run. The progress display, ``-x``, ``--junitxml`` and the reward
    service's store are implementations. Example::

        @hookimpl
        def pkb_report_job(record, reporter):
            if record.verdict == "flagged":
                notify(record.problem, record.reason)
    """


@hookspec
def pkb_report_build(solution: str, result: BuildResult, done: int, total: int) -> None:
    """One solution's build in the compile phase finished.

    :param solution: the solution file's path.
    :param result: a :class:`pkb_core.BuildResult` (``ok``, ``cached``,
        ``seconds``, ``message``, ``verdict``).
    :param done: builds finished so far, this one included; ``total``: builds
        of the phase.

    Called in the process that runs the compile phase, before any job.
    """


# ---------------------------------------------------------------------------
# Backend lifecycle hooks (every rank of a worker launch)
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def pkb_backend_init(ctx: WorkerContext) -> Any:
    """Set up the backend's runtime on this rank, once per worker launch.

    :param ctx: a :class:`pkb_core.WorkerContext` (rank, world size,
        local rank, device, the harness's gloo control group, the backend's
        options). The default process group is already initialised (NCCL on
        GPU, gloo on CPU).
    :return: any object: the backend's state (its heap, its caches), passed to
        every later hook of this rank and released by :func:`pkb_backend_finalize`.
        Raise :class:`pkb_core.errors.BackendUnavailable` when the runtime is
        missing: every job of the launch gets the verdict ``unsupported``.

    Helpers that solutions call (``pkb_triton.workspace``, say) are not handed
    the state, since pkb calls a solution with its inputs only. A backend that
    offers such helpers also registers the state it returns as its process's
    current one, and its finalize hook forgets it (pkb_triton and pkb_nvshmem
    do this).

    firstresult: the backend's answer wins over the core default, which returns
    ``ctx`` itself.
    """


@hookspec(firstresult=True)
def pkb_backend_allocate(state: Any, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Allocate a symmetric tensor that every peer can reach.

    :param state: what :func:`pkb_backend_init` returned.
    :param shape: the tensor's shape (a tuple of ints).
    :param dtype: a ``torch.dtype``.
    :return: a tensor on this rank's device whose peers' copies are reachable
        through :func:`pkb_core.symmetric.handle_of`. Collective: every rank
        calls it in the same order with the same byte size.

    The core default uses torch symm_mem on GPU and the shared-memory heap on
    CPU; backends with their own heap (NVSHMEM) override it.
    """


@hookspec(firstresult=True)
def pkb_backend_compile(state: Union[Any, BuildContext], problem: Problem, solution: Optional[str]) -> Callable:
    """Turn a solution file into a program, once per job.

    :param state: what :func:`pkb_backend_init` returned; or, in the compile
        phase, a :class:`pkb_core.BuildContext` (see below).
    :param problem: the loaded :class:`pkb_core.Problem`.
    :param solution: path of the solution file, or ``None`` when the backend
        is asked to run the problem's own reference (the self-check).
    :return: a program (usually the file's ``solution`` callable). Raise
        :class:`pkb_core.errors.CompileError` with the compiler's message:
        it becomes the ``compile-error`` verdict.

    Called twice per solution. First **ahead of time**, in the compile phase
    before any job (``pkb build``, and ``pkb run`` before its launches): in a
    locked-down builder process with no GPU and no process group, with
    ``state`` a :class:`pkb_core.BuildContext` (``ahead_of_time`` is True,
    ``device`` the device type the jobs will use, ``options`` the backend's
    ``[backends.<name>]`` table). That call builds what it can into the
    backend's own cache, keyed by content; its program is thrown away, and a
    ``CompileError`` there is the job's verdict without a launch. Then **in
    the job**, on every rank, with the backend's own state: the build is found
    in the cache, so this call loads rather than compiles. Tell the two apart
    with ``getattr(state, "ahead_of_time", False)``.
    """


@hookspec(firstresult=True)
def pkb_backend_launch(state: Any, program: Callable, inputs: tuple) -> Callable[[], Any]:
    """Bind a program to one set of inputs.

    :param state: what :func:`pkb_backend_init` returned.
    :param program: what :func:`pkb_backend_compile` returned.
    :param inputs: the positional arguments (tensors in the symmetric heap).
    :return: a zero-argument callable running the program on ``inputs`` and
        returning its outputs. It is the unit that is checked and timed: the
        harness calls it directly, many times, with no hook in between.

    The core default returns ``lambda: program(*inputs)``.
    """


@hookspec
def pkb_backend_finalize(state: Any) -> None:
    """Release the backend's runtime; always runs, also after a partial init.

    :param state: what :func:`pkb_backend_init` returned, or ``None`` when init
        failed. Every implementation runs (observers clean up too); pluggy stops
        at the first one that raises, so implementations log their own errors
        instead of raising.
    """
