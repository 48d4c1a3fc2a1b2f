"""``pkb serve`` (the reward service) and ``pkb submit`` (its command-line client); docs/serve.md."""
from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path

import click

from pkb_core.cli.limits import limit_options
from pkb_core.errors import PkbError

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
@click.option("--timeout", "job_timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds a job may run (default 120 on CPU, 300 on GPU; a submission may ask for less).")
@click.option("--build-jobs", type=click.IntRange(min=1), default=None,
              help="Builds at once in the compile pool (default: by cores and memory).")
@click.option("--token", envvar="PKB_SERVE_TOKEN", default=None,
              help="Bearer token every request must carry (env PKB_SERVE_TOKEN); required beyond localhost.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="auto", default=None, metavar="[ADDRESS]",
              help="Place groups as Ray actors on the Ray cluster at ADDRESS (alone: the one this node is in); "
                   "needs pkb[ray].")
@click.option("--place-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds a job waits for a world size no node can hold before it is an error (--ray).")
@click.pass_obj
@limit_options  # --memory-limit, --max-processes, --log-cap: pkb_core/cli/limits.py
def serve(pm, host, port, data_dir, device, devices, max_queued, max_source_kb, job_timeout, build_jobs, token,
          ray_address, place_timeout, limits):
    """Run the reward service: an HTTP queue of jobs on warm groups of this node, or of a Ray cluster's
    nodes with --ray (docs/serve.md)."""
    import uvicorn

    from pkb_core.machine.device import detect_device, device_count
    from pkb_core.serve.app import create_app
    from pkb_core.serve.service import Service, ServiceConfig

    if not _is_local(host) and not token:
        raise click.UsageError(f"--host {host} listens beyond localhost: give --token (or PKB_SERVE_TOKEN)")
    # The token lives in this process's memory only: nothing it starts inherits it.
    os.environ.pop("PKB_SERVE_TOKEN", None)
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
                           place_timeout=place_timeout, limits=limits)
    from pkb_core.process.reaper import become_subreaper

    become_subreaper()  # what a dead lane leaves becomes the service's child (reaped by its scheduler)
    service = Service(config, pm, placement)
    service.start()
    if service.recovered:
        click.echo(f"pkb serve: {service.recovered} job(s) a stopped service left were queued again", err=True)
    try:
        server = uvicorn.Server(uvicorn.Config(create_app(service, token=token), host=host, port=port,
                                               log_level="warning", access_log=False))
        _announce(server, host, data_dir, device, devices, "on Ray" if ray_address else "")
        server.run()
    finally:
        service.stop()


def _ray_placement(address: str, device: str):
    """The Ray placement (Ray is imported here only), or one line saying why there is none."""
    try:
        from pkb_core.ray.placement import RayPlacement
    except ImportError as exc:
        raise PkbError(f"--ray needs Ray: pip install 'pkb[ray]' ({exc})") from None
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


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--server", "url", envvar="PKB_SERVER", default="http://127.0.0.1:8765", show_default=True,
              help="The service's URL (env PKB_SERVER).")
@click.option("--problem", default=None, help="The problem (default: the one each file is named after, <id>_...).")
@click.option("--backend", default="reference", show_default=True)
@click.option("--nproc", "world_size", type=click.IntRange(min=1), default=None, help="World size (default 2).")
@click.option("--trials", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--measure-perf", is_flag=True)
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--client", default=None, help="Client tag for the fair share (default: $USER).")
@click.option("--fresh", is_flag=True, help="Run again even when an identical submission has a record.")
@click.option("--wait", is_flag=True, help="Wait for the verdicts and print them (exit 1 if any fails).")
@click.option("--token", envvar="PKB_SERVE_TOKEN", default=None, help="The service's token (env PKB_SERVE_TOKEN).")
@click.option("--json", "json_", is_flag=True, help="Print the jobs as JSON.")
def submit(files, url, problem, backend, world_size, trials, measure_perf, priority, client, fresh, wait, token,
           json_):
    """Submit solution files to a running `pkb serve`."""
    import re

    import httpx

    from pkb_core.client import Client, ServiceError
    from pkb_core.contracts.verdict import FAILING

    options = dict(backend=backend, world_size=world_size, trials=trials, measure_perf=measure_perf,
                   priority=priority, client=client or os.environ.get("USER", "anonymous"), fresh=fresh)
    views = []
    try:
        with Client(url, token=token) as service:
            for path in files:
                named = re.match(r"^(\d+)_", path.name)
                if not problem and not named:
                    raise PkbError(f"cannot tell the problem of {path.name}: name it <id>_<name>.py or pass --problem")
                views.append(service.submit(problem or named.group(1), path.read_text(), label=str(path), **options))
            if wait:
                views = [service.wait(view.id) for view in views]
    except ServiceError as exc:
        raise PkbError(f"the service refused: {exc.message} ({exc.status})") from None
    except httpx.HTTPError as exc:
        raise PkbError(f"cannot reach the service at {url}: {exc}") from None
    if json_:
        click.echo(json.dumps([v.to_json() for v in views], indent=2))
    else:
        for view in views:
            record = view.record
            verdict = f"{record.verdict.value}  {record.reason[:100]}" if record else view.note
            click.echo(f"{view.id}  {view.state.value:9}  {view.problem}  {verdict}")
    if wait and any(v.record is not None and v.record.verdict in FAILING for v in views):
        raise SystemExit(1)
