"""A stream of submissions through ``pkb serve`` against a loop of ``pkb run`` calls on the same files.

    python3 benchmarks/serve_stream.py OUT_DIR [--count 200] [--loop-per-kind 4] [--devices 4]
                                       [--concurrency 16] [--timeout 15] [--backend triton]
                                       [--ray ADDRESS] [--skip-loop] [--skip-batch]

Writes ``--count`` solution files into OUT_DIR/files (the backend's samples and
variants of them: correct ones with a comment of their own, so each is a distinct
file and a distinct build; wrong ones that scale their output; ones that hang;
ones that do not compile), then:

1. starts ``pkb serve`` on a free localhost port with a fresh data folder, submits
   every file through :class:`pkb_core.client.AsyncClient` with ``--concurrency``
   jobs in flight, and measures the wall time of the whole stream and each
   submission's latency (submitted to verdict);
2. runs ``pkb run --solution F`` once per file for ``--loop-per-kind`` files of each kind
   (a loop of the whole stream would take hours), timing each call, and estimates the
   loop's time on the whole stream as each kind's mean call times its count; these are
   twins of the stream's files (the same code, another comment), so their builds are cold too;
3. runs every file once more with ``pkb run --solutions OUT_DIR/files`` (one batch)
   for the verdicts, and compares them with the service's, file by file.

With ``--ray ADDRESS`` the service is ``pkb serve --ray ADDRESS`` (its groups Ray
actors on that cluster's nodes; ``--devices`` then caps the slots it uses).
``--skip-loop`` leaves out step 2 (for comparing services with each other).

Prints evals per hour of both, p50/p95 latency per submission, the ratio, and
every verdict that differs. Nothing here is timed by a test: the numbers go to
docs/benchmarks/.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

WRONG = '''

import torch as _bench_torch
_bench_original = solution


def solution(*args, **kwargs):  # a wrong variant: scales what it returns
    out = _bench_original(*args, **kwargs)
    return out * 1.5 + 1 if isinstance(out, _bench_torch.Tensor) else out
'''
HANG = '''

def solution(*args, **kwargs):  # a variant that never returns
    import time
    while True:
        time.sleep(0.05)
'''
BROKEN = "\n\ndef solution(*args:  # a variant that does not parse\n"


def write_files(out: Path, count: int, backend: str, seed: int = 0, tag: str = "") -> list[Path]:
    """``count`` files in ``out``: 70 % correct, 15 % wrong, 10 % compile errors, 5 % hanging.
    ``tag`` goes into every file, so files of another run (or the loop's twins) are other
    files to the build cache: every build is cold."""
    import importlib

    module = importlib.import_module(f"pkb_{backend}")
    samples = sorted((Path(module.__file__).parent / "samples").glob("*.py"))
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for index in range(count):
        sample = samples[index % len(samples)]
        roll = rng.random()
        kind = "ok" if roll < 0.70 else "wrong" if roll < 0.85 else "broken" if roll < 0.95 else "hang"
        text = sample.read_text() + f"\n# stream variant {index} ({kind}) {tag}\n"
        text += {"ok": "", "wrong": WRONG, "broken": BROKEN, "hang": HANG}[kind]
        path = out / f"{sample.stem}_v{index:03d}.py"
        path.write_text(text)
        files.append(path)
    return files


def kind_of(path: Path) -> str:
    """The kind a file was written as (its marker comment)."""
    return re.search(r"# stream variant \d+ \((\w+)\)", path.read_text()).group(1)


def stratified(files: list[Path], per_kind: int) -> list[Path]:
    """Up to ``per_kind`` files of each kind, the first ones in order."""
    taken, chosen = {}, []
    for path in files:
        kind = kind_of(path)
        if taken.get(kind, 0) < per_kind:
            taken[kind] = taken.get(kind, 0) + 1
            chosen.append(path)
    return chosen


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def stream(url: str, files: list[Path], backend: str, concurrency: int, timeout: float) -> dict:
    from pkb_core.client import AsyncClient

    gate = asyncio.Semaphore(concurrency)
    latencies, verdicts, job_seconds = {}, {}, []

    async def one(client, path):
        async with gate:
            started = time.monotonic()
            problem = re.match(r"^(\d+)_", path.name).group(1)
            job = await client.submit(problem, path.read_text(), backend=backend, timeout=timeout,
                                      client=f"bench{hash(path.name) % 3}", fresh=True)
            view = await client.wait(job.id)
            record = view.record
            latencies[path.name] = time.monotonic() - started
            verdicts[path.name] = record.verdict.value if record else "cancelled"
            if record is not None and record.seconds is not None and record.verdict.value == "pass":
                # On its group: from the service handing it over to the record stored, against the job's own
                # phases (its candidate's setup, trials and timing): what is left is the per-job overhead.
                own = sum(record.phase_seconds.get(k, 0.0) for k in ("setup", "trials", "timing"))
                job_seconds.append((view.finished_at - view.started_at, own))

    async with AsyncClient(url, timeout=120) as client:
        started = time.monotonic()
        await asyncio.gather(*(one(client, path) for path in files))
        wall = time.monotonic() - started
    return {"wall": wall, "latencies": latencies, "verdicts": verdicts, "job_seconds": job_seconds}


def start_service(out: Path, *options: str, command=("pkb",)) -> tuple[subprocess.Popen, str]:
    """``pkb serve`` on a free port with a fresh ``out/serve-data`` (log: ``out/serve.log``),
    once it answers; its process and URL."""
    import httpx

    port = free_port()
    data = out / "serve-data"
    shutil.rmtree(data, ignore_errors=True)
    server = subprocess.Popen([*command, "serve", "--port", str(port), "--data", str(data), *options],
                              stderr=open(out / "serve.log", "wb"))
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            httpx.get(url + "/v1/health", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    return server, url


def serve_and_stream(args, files: list[Path]) -> dict:
    ray = ["--ray", args.ray] if args.ray else []
    server, url = start_service(args.out, "--devices", str(args.devices), "--timeout", str(args.timeout),
                                "--max-queued", str(len(files) + 10), *ray)
    try:
        return asyncio.run(stream(url, files, args.backend, args.concurrency, args.timeout))
    finally:
        server.terminate()
        server.wait(timeout=60)


def loop(args, files: list[Path]) -> list[float]:
    walls = []
    for path in files:
        started = time.monotonic()
        subprocess.run(["pkb", "run", "--backend", args.backend, "--solution", str(path), "--timeout",
                        str(args.timeout), "--out", str(args.out / "loop" / path.stem)], capture_output=True)
        walls.append(time.monotonic() - started)
    return walls


def batch_verdicts(args) -> dict:
    out = args.out / "batch"
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run(["pkb", "run", "--backend", args.backend, "--solutions", str(args.out / "files"),
                           "--timeout", str(args.timeout), "--out", str(out), "--json"], capture_output=True, text=True)
    results = json.loads(proc.stdout)["results"]
    return {Path(r["solution"]).name: r["verdict"] for r in results}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--loop-per-kind", type=int, default=4,
                        help="pkb run calls per kind of file (correct, wrong, broken, hanging) for the loop's estimate")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--skip-batch", action="store_true", help="Do not run the batch for verdicts.")
    parser.add_argument("--skip-service", action="store_true", help="Measure the loop only.")
    parser.add_argument("--skip-loop", action="store_true", help="Do not time the pkb run loop.")
    parser.add_argument("--ray", default=None, metavar="ADDRESS", help="Serve with pkb serve --ray ADDRESS.")
    args = parser.parse_args()
    shutil.rmtree(args.out / "files", ignore_errors=True)
    shutil.rmtree(args.out / "loop-files", ignore_errors=True)
    nonce = f"{time.time_ns():x}"
    files = write_files(args.out / "files", args.count, args.backend, tag=nonce)
    twins = write_files(args.out / "loop-files", args.count, args.backend, tag=nonce + " loop")
    if args.skip_service:  # the loop alone (the service's numbers came from an earlier call)
        served = {"wall": float("nan"), "latencies": {f.name: float("nan") for f in files}, "verdicts": {},
                  "job_seconds": [(float("nan"), float("nan"))]}
    else:
        served = serve_and_stream(args, files)
    lat = sorted(served["latencies"].values())
    service_rate = len(files) / served["wall"] * 3600
    print(f"service: {len(files)} submissions in {served['wall']:.1f} s = {service_rate:.0f} evals/hour; "
          f"latency p50 {statistics.median(lat):.2f} s, p95 {lat[int(0.95 * (len(lat) - 1))]:.2f} s; "
          f"a passing job on its group: median {statistics.median(t for t, _ in served['job_seconds']):.2f} s, of which "
          f"its own setup, trials and timing {statistics.median(o for _, o in served['job_seconds']):.2f} s; "
          f"overhead median {statistics.median(t - o for t, o in served['job_seconds']):.2f} s")
    if not args.skip_loop:
        kinds = {path.name: kind_of(path) for path in files}
        sample = stratified(twins, args.loop_per_kind)
        walls = dict(zip((p.name for p in sample), loop(args, sample)))
        per_kind = {}
        for name, wall in walls.items():
            per_kind.setdefault(kind_of(args.out / "loop-files" / name), []).append(wall)
        # What the loop would take on the whole stream: each kind's mean call, times its count in the stream.
        estimate = sum(statistics.mean(per_kind[kind]) for kind in kinds.values())
        loop_rate = len(files) / estimate * 3600
        ordered = sorted(walls.values())
        print(f"pkb run loop: {len(sample)} calls ({', '.join(f'{k} {statistics.mean(v):.2f} s' for k, v in per_kind.items())}"
              f" per call); the stream would take {estimate:.0f} s = {loop_rate:.0f} evals/hour; "
              f"latency p50 {statistics.median(ordered):.2f} s, p95 {ordered[int(0.95 * (len(ordered) - 1))]:.2f} s")
        print(f"ratio: {service_rate / loop_rate:.1f}x the evals per hour of the loop")
    counts = {}
    for verdict in served["verdicts"].values():
        counts[verdict] = counts.get(verdict, 0) + 1
    print(f"service verdicts: {json.dumps(counts, sort_keys=True)}")
    if not args.skip_batch:
        batch = batch_verdicts(args)
        differ = {name: (served["verdicts"].get(name), verdict) for name, verdict in batch.items()
                  if served["verdicts"].get(name) != verdict}
        print(f"verdicts equal to pkb run's: {len(batch) - len(differ)} of {len(batch)}")
        for name, (service, run) in sorted(differ.items()):
            print(f"  differs: {name}: service {service}, pkb run {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
