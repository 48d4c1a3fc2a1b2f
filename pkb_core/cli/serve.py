"""``pkb serve`` (the reward service), and ``pkb submit`` and ``pkb cancel`` (its command-line
clients); docs/serve.md.

What keeps a service from starting is one line and exit status 4, before anything
starts (:class:`~pkb_core.errors.CannotStart`): the serve extra not installed, a
port in use (the listening socket is bound before the service starts), a data
directory another service holds (:mod:`pkb_core.serve.data_lock`).
"""
from __future__ import annotations

import contextlib
import importlib
import ipaddress
import json
import os
from pathlib import Path

import click

from pkb_core.cli.numbers import FiniteFloatRange
from pkb_core.cli.limits import limit_options
from pkb_core.errors import CannotStart, PkbError
from pkb_core.serve.quota import DEFAULT_MAX_JOBS, DEFAULT_MAX_SOURCE_BYTES

LOCALHOST = ("127.0.0.1", "::1", "localhost")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything beyond localhost needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port (0: any free one).")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("pkb-serve"),
              show_default=True, help="Folder of the SQLite queue, the sources, the lanes' runs and logs.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--devices", type=click.IntRange(min=1), default=None,
              help="Devices groups may use (default: every GPU; in CPU mode 2 rank slots, or as many as cores).")
@click.option("--max-queued", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Jobs waiting at most; more are refused with 429.")
@click.option("--max-source-kb", type=click.IntRange(min=1), default=512, show_default=True,
              help="Largest solution source accepted.")
@click.option("--timeout", "job_timeout", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Seconds a job may run (default 120 on CPU, 300 on GPU; a submission may ask for less).")
@click.option("--build-jobs", type=click.IntRange(min=1), default=None,
              help="Builds at once in the compile pool (default: by cores and memory); one client holds all "
                   "but one of them at most.")
@click.option("--build-timeout", type=FiniteFloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds one solution's build may take before it is a compile-error.")
@click.option("--token", envvar="PKB_SERVE_TOKEN", default=None,
              help="Bearer token every request must carry (env PKB_SERVE_TOKEN): the admin's, which sees every "
                   "job; required beyond localhost, unless --tokens gives tokens.")
@click.option("--tokens", "tokens_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="TOML file of client tokens ([clients] name = token) and an admin token (admin = token): "
                   "a client sees and cancels only its own jobs. Mode 600.")
@click.option("--client-max-jobs", type=click.IntRange(min=1), default=DEFAULT_MAX_JOBS, show_default=True,
              help="Jobs one client keeps at most, finished ones included until retention prunes them; "
                   "more are refused with 429.")
@click.option("--client-max-source-mb", type=click.IntRange(min=1), default=DEFAULT_MAX_SOURCE_BYTES >> 20,
              show_default=True, help="MiB of sources one client keeps at most; more are refused with 429.")
@click.option("--retention-days", type=FiniteFloatRange(min=0), default=30.0, show_default=True,
              help="Days a finished job (its record and source) is kept; pruned at start and hourly (0: for ever).")
@click.option("--ray", "ray_address", is_flag=False, flag_value="auto", default=None, metavar="[ADDRESS]",
              help="Place groups as Ray actors on the Ray cluster at ADDRESS (alone: the one this node is in); "
                   "needs pkb[ray].")
@click.option("--place-timeout", type=FiniteFloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds a job waits for a world size no node can hold before it is an error (--ray).")
@click.pass_obj
@limit_options  # --memory-limit, --max-processes, --log-cap: pkb_core/cli/limits.py
def serve(pm, host, port, data_dir, device, devices, max_queued, max_source_kb, job_timeout, build_jobs,
          build_timeout, token, tokens_file, client_max_jobs, client_max_source_mb, retention_days, ray_address,
          place_timeout, limits):
    """Run the reward service: an HTTP queue of jobs on warm groups of this node, or of a Ray cluster's
    nodes with --ray (docs/serve.md)."""
    _serve_extra("pkb serve", "fastapi", "uvicorn")
    import uvicorn

    from pkb_core.cli.config import config_of
    from pkb_core.machine.device import detect_device, device_count
    from pkb_core.serve.access import Access, load_tokens
    from pkb_core.serve.app import create_app
    from pkb_core.serve.service import Service, ServiceConfig

    tokens = load_tokens(tokens_file) if tokens_file else None
    access = Access(admin_tokens=[token, tokens.admin if tokens else None], clients=tokens.clients if tokens else {})
    if not _is_local(host) and not access.required:
        raise click.UsageError(f"--host {host} listens beyond localhost: give --token (or PKB_SERVE_TOKEN) "
                               "or --tokens")
    # The token lives in this process's memory only: nothing it starts inherits it.
    os.environ.pop("PKB_SERVE_TOKEN", None)
    listener = _listen(host, port)
    click.get_current_context().call_on_close(listener.close)
    device = detect_device(device)
    placement = None
    if ray_address:
        placement = _ray_placement(ray_address, device)
        devices = devices or max(1, placement.capacity())
    else:
        available = device_count(device) if device == "cuda" else max(2, (os.cpu_count() or 2))
        devices = devices or (available if device == "cuda" else 2)
        if device == "cuda" and devices > available:
            raise PkbError(f"--devices {devices} but only {available} GPU(s) here")
    config = ServiceConfig(data_dir=data_dir, device=device, devices=devices, max_queued=max_queued,
                           max_source_bytes=max_source_kb << 10, job_timeout=job_timeout, build_workers=build_jobs,
                           build_timeout=build_timeout,
                           place_timeout=place_timeout, limits=limits, client_max_jobs=client_max_jobs,
                           client_max_source_bytes=client_max_source_mb << 20, retention_days=retention_days)
    from pkb_core.process.reaper import become_subreaper

    become_subreaper()  # what a dead lane leaves becomes the service's child (reaped by its scheduler)
    # Refused here when another service holds the data directory.
    service = Service(config, pm, placement, pkb_config=config_of())
    service.start()
    if service.recovered:
        click.echo(f"pkb serve: {service.recovered} job(s) a stopped service left were queued again", err=True)
    if any(service.pruned):
        click.echo(f"pkb serve: pruned {service.pruned} older than {retention_days:g} days", err=True)
    try:
        server = uvicorn.Server(uvicorn.Config(create_app(service, access=access), host=host, port=port,
                                               log_level="warning", access_log=False))
        _announce(server, host, data_dir, device, devices, "on Ray" if ray_address else "")
        server.run(sockets=[listener])
    finally:
        service.stop()


def _serve_extra(command: str, *modules: str) -> None:
    """Import the serve extra's ``modules``, or one line saying how to install them."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise CannotStart(f"{command} needs pkb's serve extra, which is not installed ({exc}): "
                              "pip install 'pkb[serve]'") from None


def _listen(host: str, port: int):
    """The service's listening socket, bound before the service starts, so that a port in use is one
    line and nothing was started (uvicorn serves on it as given)."""
    import errno
    import socket

    # The family and address as uvicorn would bind them itself (IPv6 for an address with a colon).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart takes a port in TIME_WAIT
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CannotStart(f"port {port} on {host} is in use (another pkb serve?): stop what listens there, "
                              "or choose another --port (0: any free one)") from None
        raise CannotStart(f"cannot listen on {host} port {port}: {exc.strerror}") from None
    return sock


def _ray_placement(address: str, device: str):
    """The Ray placement (Ray is imported here only), or one line saying why there is none."""
    try:
        from pkb_core.ray.placement import RayPlacement
    except ImportError as exc:
        raise CannotStart(f"--ray needs Ray, which is not installed ({exc}): pip install 'pkb[ray]'") from None
    try:
        return RayPlacement(address, device=device)
    except ConnectionError as exc:
        raise PkbError(f"--ray {address}: cannot join the Ray cluster ({exc})") from None


def _announce(server, host, data_dir, device, devices, where="") -> None:
    """Print the address once the server listens (the real port when --port 0)."""
    started = server.startup

    async def startup(sockets=None):
        await started(sockets=sockets)
        for listener in server.servers:
            for sock in listener.sockets:
                bound = sock.getsockname()
                click.echo(f"pkb serve: listening on http://{host}:{bound[1]}  ({device}, {devices} device(s)"
                           f"{' ' + where if where else ''}; data in {data_dir})", err=True)
                return

    server.startup = startup


def _is_local(host: str) -> bool:
    if host in LOCALHOST:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: Refusals that concern one submitted file (an unknown problem, an option the service does not
#: take): that file is left out and the others go on. Any other refusal (a wrong token) stops.
FILE_REFUSALS = (404, 413, 422)


def _server_options(command):
    """``--server`` and ``--token``, shared by the service's command-line clients."""
    command = click.option("--token", envvar="PKB_SERVE_TOKEN", default=None,
                           help="The service's token (env PKB_SERVE_TOKEN).")(command)
    return click.option("--server", "url", envvar="PKB_SERVER", default="http://127.0.0.1:8765", show_default=True,
                        callback=_service_url, help="The service's URL (env PKB_SERVER).")(command)


def _service_url(ctx, param, url: str) -> str:
    """``url`` with its scheme (``localhost:8765`` read as the scheme ``localhost``: refused in words)."""
    if "://" not in url:
        raise click.BadParameter(f"{url!r} has no scheme: http://{url}, say")
    return url


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@_server_options
@click.option("--problem", default=None, help="The problem (default: the one each file is named after, <id>_...).")
@click.option("--backend", default=None,
              help='The backend of the files that declare none (BACKEND = "name" in the file); '
                   "required when one declares none and no [submit] backend is configured.")
@click.option("--nproc", "world_size", type=click.IntRange(min=1), default=None, help="World size (default 2).")
@click.option("--trials", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--measure-perf", is_flag=True, help="Time each job against the reference (--wait prints the speedup).")
@click.option("--timeout", "job_timeout", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Seconds each job may run (default: the service's --timeout; at most 3600).")
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--client", default=None, help="Client tag for the fair share (default: $USER).")
@click.option("--fresh", is_flag=True, help="Run again even when an identical submission has a record.")
@click.option("--wait", is_flag=True, help="Wait for the verdicts and print them (exit 1 if any fails).")
@click.option("--json", "json_", is_flag=True, help="Print the jobs as JSON.")
@click.pass_context
def submit(ctx, files, url, token, problem, backend, world_size, trials, measure_perf, job_timeout, priority, client,
           fresh, wait, json_):
    """Submit solution files to a running `pkb serve`.

    Each file's backend is the one it declares (a module constant BACKEND = "name"), else --backend.
    A file that cannot be read or placed is one line and is left out; the others are queued, each id
    printed as it is queued."""
    from click.core import ParameterSource

    _serve_extra("pkb submit", "httpx")
    from pkb_core.client import Client, ServiceError
    from pkb_core.client.http import UNREACHABLE
    from pkb_core.contracts.verdict import FAILING

    typed = ctx.get_parameter_source("backend") == ParameterSource.COMMANDLINE
    items, left_out = [], 0
    for path in files:
        try:
            items.append(_submission_of(path, problem, backend, typed))
        except _LeftOut as why:
            click.echo(f"Error: {_shown_path(path)}: {why}", err=True)
            left_out += 1
    unbacked = [path.name for path, _, _, chosen in items if chosen is None]
    if unbacked:
        shown = ", ".join(unbacked[:3]) + (f" and {len(unbacked) - 3} more" if len(unbacked) > 3 else "")
        raise click.UsageError(f"no backend for {shown}: pass --backend NAME, declare BACKEND = \"NAME\" in the "
                               "file, or set backend in [submit] of pkb.toml")
    options = dict(world_size=world_size, trials=trials, measure_perf=measure_perf, timeout=job_timeout,
                   priority=priority, client=client or os.environ.get("USER", "anonymous"), fresh=fresh)
    progress_to_stderr = wait or json_  # stdout is then the verdicts, or JSON
    queued = []

    def waiting_for_room(seconds: float, line: str) -> None:
        # A full queue is retried (Client): said, rather than a silent wait a service user killed.
        click.echo(f"{line or 'the queue is full'}: submitting again in {seconds:g} s", err=True)

    with _service_calls(url):
        with Client(url, token=token, on_full=waiting_for_room) as service:
            for path, problem_id, text, chosen in items:
                try:
                    view = service.submit(problem_id, text, backend=chosen, label=f"{path.stem}-{{job}}{path.suffix}",
                                          **options)
                except ServiceError as exc:
                    if exc.status not in FILE_REFUSALS:
                        raise
                    click.echo(f"Error: {_shown_path(path)}: the service refused it: {exc.message} ({exc.status})",
                               err=True)
                    left_out += 1
                    continue
                queued.append((path, view))
                click.echo(_job_line(view, path), err=progress_to_stderr)
            if wait:
                ids = " ".join(view.id for _, view in queued)
                try:
                    queued = [(path, service.wait(view.id)) for path, view in queued]
                except KeyboardInterrupt:
                    # Interrupting the wait stops nothing on the service: say so, and where the
                    # jobs' verdicts are (a new user's Ctrl-C exited 2 without a word).
                    click.echo(f"interrupted: the {len(queued)} job(s) submitted go on on the service ({ids}); "
                               f"`pkb jobs {ids}` shows them, `pkb cancel {ids}` stops them", err=True)
                    raise
                except ServiceError as exc:
                    if exc.status != UNREACHABLE:
                        raise
                    # The service went away under the wait: its jobs are in its store, not lost.
                    raise PkbError(f"{exc.message.rstrip('.')}; the {len(queued)} job(s) submitted ({ids}) are kept by the "
                                   f"service, which queues them again when it starts: `pkb jobs {ids} --wait` "
                                   "waits for them") from None
    if json_:
        click.echo(json.dumps([view.to_json() for _, view in queued], indent=2))
    elif wait:
        for path, view in queued:
            click.echo(_job_line(view, path))
    failed = wait and any(v.record is not None and v.record.verdict in FAILING for _, v in queued)
    if failed or left_out:
        raise SystemExit(1)


def _refusal(exc) -> str:
    """The line of a :class:`~pkb_core.client.ServiceError`: no answer came (its message names the
    URL and why), or the service refused (its message and status)."""
    from pkb_core.client.http import UNREACHABLE

    return exc.message if exc.status == UNREACHABLE else f"the service refused: {exc.message} ({exc.status})"


@contextlib.contextmanager
def _service_calls(url: str):
    """The service's refusal, or no answer from it, as one ``Error:`` line (what every command-line
    client of ``pkb serve`` says when a call fails)."""
    import httpx

    from pkb_core.client import ServiceError

    try:
        yield
    except ServiceError as exc:
        raise PkbError(_refusal(exc)) from None
    except httpx.HTTPError as exc:
        raise PkbError(f"cannot reach the service at {url}: {exc}") from None


def _shown_path(path: Path) -> str:
    """``path`` as an error line shows it: quoted, its escapes shown, where it holds a character
    that is not printable (a newline in a file name split the line in two, the second reading as a
    job that passed: a hostile review, 2026-12-01)."""
    return str(path) if str(path).isprintable() else repr(str(path))


class _LeftOut(Exception):
    """A file ``pkb submit`` leaves out; the message says why (one line)."""


def _submission_of(path: Path, problem: str | None, backend: str | None, typed: bool) -> tuple:
    """``(path, problem, text, backend or None)`` of one file; :class:`_LeftOut` when it cannot be sent.

    :param typed: whether ``backend`` was typed on the command line (then a file declaring another is
        left out) rather than configured (then the file's declaration wins)."""
    from pkb_core.launch.plan import named_problem
    from pkb_core.problem.solution_backend import declared_backend

    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise _LeftOut(f"cannot read it ({exc.strerror}); not submitted") from None
    except UnicodeDecodeError as exc:
        raise _LeftOut(f"is not UTF-8 text ({exc.reason} at byte {exc.start}); not submitted") from None
    if not path.name.isprintable():
        raise _LeftOut("its name holds a character that is not printable (a newline, a control code): rename it; "
                       "not submitted")
    named = named_problem(path)
    if not problem and named is None:
        raise _LeftOut("cannot tell its problem: name it <id>_<name>.py or pass --problem")
    declared = declared_backend(text)
    if declared and typed and backend != declared:
        raise _LeftOut(f'it declares BACKEND = "{declared}" but --backend {backend} was given; not submitted')
    return path, problem or named, text, declared or backend


#: Lines of a reason ``pkb submit --wait`` shows: the error itself (``--json`` has all of it).
REASON_LINES = 6


def _job_line(view, path: Path) -> str:
    """``<id>  <state>  <problem>  <file>`` and, once it has one, the verdict, speedup and reason.

    The reason's first line follows in full (a compiler's or Python's error line is the news),
    its next lines below it, indented, up to :data:`REASON_LINES` in all; it names the file
    as the user gave it (``path``), where the record names it by its label."""
    from pkb_core.cli.progress import speedup_text

    line = f"{view.id}  {view.state.value:9}  {view.problem}  {path}"
    record = view.record
    if record is None:
        return f"{line}  {view.note}".rstrip()
    timed = speedup_text(record)
    reason = record.reason.replace(record.solution, str(path)) if record.solution else record.reason
    lines = [text.rstrip() for text in reason.splitlines() if text.strip()] or [""]
    shown = [f"{line}  {record.verdict.value}{'  ' + timed if timed else ''}  {lines[0]}".rstrip()]
    shown += [f"    {text}" for text in lines[1:REASON_LINES]]
    if len(lines) > REASON_LINES:
        shown.append(f"    ({len(lines) - REASON_LINES} more line(s): pkb submit --wait --json has them)")
    return "\n".join(shown)


@click.command()
@click.argument("job_ids", nargs=-1)
@_server_options
@click.option("--wait", is_flag=True, help="Wait until each of the jobs is finished.")
@click.option("--json", "json_", is_flag=True, help="Print the jobs as JSON (with their records).")
def jobs(job_ids, url, token, wait, json_):
    """Jobs of a running `pkb serve`: those named (as `pkb submit` printed their ids), else the
    newest ones the token may see; one line each, with the verdict and reason once finished.

    Exit status 1 if a job named failed (as `pkb submit --wait`)."""
    _serve_extra("pkb jobs", "httpx")
    from pkb_core.client import Client
    from pkb_core.contracts.verdict import FAILING

    if wait and not job_ids:
        raise click.UsageError("--wait needs the ids of the jobs to wait for")
    try:
        with _service_calls(url), Client(url, token=token) as service:
            views = ([service.wait(job_id) if wait else service.get(job_id) for job_id in job_ids] if job_ids
                     else service.jobs())
    except KeyboardInterrupt:
        click.echo("interrupted: the jobs go on on the service", err=True)
        raise
    if json_:
        click.echo(json.dumps([view.to_json() for view in views], indent=2))
    elif not views:
        click.echo(f"no jobs on {url} that this client may see", err=True)
    else:
        for view in views:
            label = Path(view.record.solution).name if view.record is not None and view.record.solution else "-"
            click.echo(_job_line(view, Path(label)))
    if job_ids and any(view.record is not None and view.record.verdict in FAILING for view in views):
        raise SystemExit(1)


@click.command()
@click.argument("job_ids", nargs=-1)
@_server_options
@click.option("--client", default=None, help="Every unfinished job of this client tag.")
@click.option("--all", "all_", is_flag=True, help="Every unfinished job of the service.")
@click.option("--json", "json_", is_flag=True, help="Print the answer as JSON.")
def cancel(job_ids, url, token, client, all_, json_):
    """Cancel jobs of a running `pkb serve` in one call: by id, every one of --client, or --all.

    Waiting jobs are cancelled at once; running ones have their candidates killed."""
    if not (job_ids or client or all_):
        raise click.UsageError("say which jobs to cancel: job ids, --client NAME, or --all")
    if all_ and (job_ids or client):
        raise click.UsageError("--all cancels every unfinished job: give it without job ids or --client")
    _serve_extra("pkb cancel", "httpx")
    from pkb_core.client import Client

    with _service_calls(url), Client(url, token=token) as service:
        answer = service.cancel_jobs(job_ids or None, client=client, all=all_)
    if json_:
        click.echo(json.dumps(answer.to_json(), indent=2))
        return
    click.echo(f"cancelled {len(answer.cancelled)} waiting job(s); stopping {len(answer.stopping)} running"
               + (f": {', '.join(answer.stopping)}" if answer.stopping else ""))
    untouched = [job_id for job_id in job_ids if job_id not in {*answer.cancelled, *answer.stopping}]
    if untouched:  # a job named and not cancelled is the command's failure (exit 1), as in `pkb jobs`
        click.echo(f"not cancelled (finished already, or unknown): {', '.join(untouched)}")
        raise SystemExit(1)
