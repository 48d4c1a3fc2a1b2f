#!/usr/bin/env python3
"""What a host engine's window reads, by what surrounds it (issue 53; one GPU is enough).

Usage::

    python3 benchmarks/timekeeper_neighbours.py [--windows 200] [--reps 4] [--host-us 250]
        [--sweep cpus|cadence|regions|sides|work] [--set-bytes 4096] [--regions 4] [--gates stream,pkb]
        [--sides 2] [--pool 1] [--openings pkb,as-queued] [--engines ce,sm] [--cycles 0,1000,...]

This process plays the judge's timekeeper, pinned to one CPU, on pkb's own host engine
(:class:`pkb_core.judge.timekeeper.HostClock`: its regions, staging and snapshots; with the
opening ``pkb`` its own ``open``). Side processes map the regions into their GPU with pkb's
:class:`pkb_core.harness.gates.SideRegion` and queue each call on a stream behind its gate:
wait for ``go``, copy the set in, one kernel, copy it out, write ``used`` and ``done``, after
``--host-us`` of busy host work a call (pkb's harness costs a side's host 235-450 us a call).

Each condition is one batch of ``--windows`` windows; the conditions are taken in a new random
order in each of ``--reps`` repetitions, so the machine's drift falls on all of them alike. The
sweeps:

* ``cpus``: the side's process on each CPU (``side@C``), a busy Python loop on each CPU beside
  a side on a far one (``busy@C``), and the side waiting for its stream asleep (``/block``);
* ``cadence``: how the timekeeper opens a batch's windows (:data:`OPENINGS`) by the side's host
  pace (0, 100, 300 us a call) and gate (:data:`GATES`);
* ``regions``: one side, its batches on ``--regions`` regions in turn (an offset that stays with
  one region is one that two groups of a job, each on its own region, would carry);
* ``sides``: ``--sides`` side processes of the same code, one timekeeper, their batches
  interleaved, each on a region of its own pool of ``--pool`` (what an A/A job is, on one GPU),
  its set copied by each of ``--engines`` (``ce`` or ``sm``, as in the ``work`` sweep, or ``smw``:
  ``sm`` with both slots read by kernels just before each gate, between windows, which would
  take out of a window whatever its first touch of the region costs the GPU, e.g. the
  translation of its host pages; so too in the ``regions`` sweep);
* ``work``: one side, pkb's opening, a ``torch.cuda._sleep`` of each of ``--cycles`` after the
  call's kernel, with the set copied in and out by the copy engine (``ce``: ``copy_``, a memcpy)
  or by kernels (``sm``: an elementwise kernel reading and writing the region's host memory), as
  pkb's harness copies with ``PKB_HARNESS_COPIES`` unset or ``kernels`` (:mod:`pkb_core.harness.copies`).
  A window that grows with the work in steps (pkb's windows sat at levels about 8-9.5 us apart)
  rather than along it says where the steps come from.

For each condition it prints the windows' median, 10th and 90th percentiles (us, the first
window of each batch left out) and each repetition's median: conditions whose medians stay apart
in every repetition differ by an offset that a job's rounds would not average away. The CPUs'
topology (``/sys``: core, package, SMT siblings) is printed first.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import time

SET_BYTES = 4096
#: How the timekeeper opens a batch's windows (``--sweep cadence``): each once its call is queued
#: (pkb's host engine before 2026-11-29); only once the whole batch is queued; each once its call
#: is queued and no sooner than ``PACE_US`` after the previous window closed; or by pkb's own
#: timekeeper (:meth:`pkb_core.judge.timekeeper.HostClock.open`, as a GPU judge runs it).
OPENINGS = ("as-queued", "all-queued", "paced", "pkb")
PACE_US = 500
#: How the side's stream waits for ``go`` and writes ``used`` and ``done``: stream memory
#: operations queued here (``stream``), or whatever pkb's side region queues (``pkb``:
#: :class:`pkb_core.harness.gates.SideRegion`; stream memory operations too, but at commit
#: f712c00 one-thread kernels, which docs/benchmarks/2026-11-29-h200-window-groups.md compares).
GATES = ("stream", "pkb")


def _topology() -> list[str]:
    lines = []
    for cpu in sorted(os.sched_getaffinity(0)):
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        fields = []
        for name in ("core_id", "physical_package_id", "thread_siblings_list"):
            try:
                with open(base + name) as handle:
                    fields.append(f"{name}={handle.read().strip()}")
            except OSError:
                fields.append(f"{name}=?")
        lines.append(f"cpu{cpu} " + " ".join(fields))
    return lines


def _pin(pid: int, cpu: int) -> None:
    """Every thread of process ``pid`` on ``cpu`` (CUDA's and torch's threads too)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), {cpu})
        except ProcessLookupError:
            pass  # a thread that ended meanwhile


def _busy(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def side(path: str, host_us: float) -> None:
    """The side: for each request line ``EPOCH COUNT MODE`` queue COUNT calls, wait, answer ``ok``."""
    import torch

    from pkb_core.harness.gates import DONE, GO, USED, SideRegion, stream_wait, stream_write

    on_gpu = torch.cuda.is_available()  # without one (a smoke test of this script) the side polls
    device = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)  # the context the region is pinned and mapped in
        stream, done_event = torch.cuda.Stream(device), torch.cuda.Event(blocking=True)
    buffer = torch.zeros(SET_BYTES, dtype=torch.uint8, device=device)
    scratch = torch.zeros(SET_BYTES, dtype=torch.uint8, device=device)

    from pkb_core.harness.copies import copy_into

    def copy(dst, src, engine: str) -> None:
        # pkb's harness's own copies (PKB_HARNESS_COPIES): a kernel (the SMs) or a memcpy (the copy engine)
        copy_into(dst, src, "engine" if engine == "ce" else "kernels")

    regions = [SideRegion(device=device, path=one, in_bytes=SET_BYTES, out_bytes=SET_BYTES)
               for one in path.split(",")]
    # The kernels once before any gate: a first launch loads its module, which (lazy loading)
    # waits for the device, and the device would be waiting for a gate that waits for this host.
    for region in regions:
        for engine in ("ce", "sm"):
            copy(buffer, region.in_slot, engine)
            buffer.add_(1)
            copy(region.out_slot[:SET_BYTES], buffer, engine)
    if on_gpu:
        torch.cuda._sleep(1)
        torch.cuda.synchronize(device)
    print("ready", flush=True)
    for line in sys.stdin:
        epoch, count, mode, index, engine, cycles = (line.split() + ["ce", "0"])[:6]
        epoch, count, region, cycles = int(epoch), int(count), regions[int(index)], int(cycles)
        mode, _, busy_us = mode.partition(":")
        mode, _, gate = mode.partition("+")
        busy_us = float(busy_us) if busy_us else host_us
        with torch.cuda.stream(stream) if on_gpu else contextlib.nullcontext():
            for w in range(count):
                mark = epoch + 1 + w
                if mode != "block":
                    _busy(busy_us)
                if not on_gpu:
                    region.write_queued(mark)
                handle = torch.cuda.current_stream(device).cuda_stream if on_gpu else None
                if engine == "smw":  # touch both slots by kernels before the gate: between windows
                    copy(scratch, region.in_slot, engine)
                    copy(scratch, region.out_slot[:SET_BYTES], engine)
                if on_gpu and gate == "stream":  # the front end's wait, as pkb's gates were
                    stream_wait(handle, region.ptr + GO, mark)
                else:
                    region.wait_go(mark, time.monotonic() + 10)
                copy(buffer, region.in_slot, engine)
                buffer.add_(1)
                if on_gpu and cycles:
                    torch.cuda._sleep(cycles)
                copy(region.out_slot[:SET_BYTES], buffer, engine)
                if on_gpu and gate == "stream":  # and the front end's writes
                    stream_write(handle, region.ptr + USED, SET_BYTES)
                    stream_write(handle, region.ptr + DONE, mark)
                else:
                    region.finish(SET_BYTES, mark)
                if on_gpu:
                    region.write_queued(mark)
            if on_gpu and mode == "block":
                done_event.record(stream)
                done_event.synchronize()
            elif on_gpu:
                torch.cuda.synchronize(device)
        print("ok", flush=True)


def busy_loop() -> None:
    while True:
        pass


def main() -> int:
    global SET_BYTES
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("timekeeper", "side", "busy"), default="timekeeper")
    parser.add_argument("--path", default="")
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--host-us", type=float, default=250.0)
    parser.add_argument("--sweep", choices=("cpus", "cadence", "regions", "sides", "work"), default="cpus")
    parser.add_argument("--sides", type=int, default=2, help="side processes (--sweep sides)")
    parser.add_argument("--pool", type=int, default=1, help="regions of each side process (--sweep sides)")
    parser.add_argument("--openings", default="pkb", help="openings to time (--sweep sides)")
    parser.add_argument("--engines", default="ce", help="how the set is copied, ce, sm and/or smw (--sweep regions, sides)")
    parser.add_argument("--set-bytes", type=int, default=4096, help="bytes of each call's set")
    parser.add_argument("--regions", type=int, default=4, help="gate regions (--sweep regions)")
    parser.add_argument("--gates", default=",".join(GATES), help="gates to time (--sweep regions, sides)")
    parser.add_argument("--cycles", default="0,1000,2000,3000,4000,5000,6000,8000,10000,12000,16000,20000",
                        help="sleeps after the call's kernel (--sweep work)")
    args = parser.parse_args()
    SET_BYTES = args.set_bytes
    if args.role == "side":
        side(args.path, args.host_us)
        return 0
    if args.role == "busy":
        busy_loop()
        return 0

    from pkb_core.harness.gates import slot_layout
    from pkb_core.judge.timekeeper import HOST_ENGINE_SPINS, STALL_S, HostClock

    cpus = sorted(os.sched_getaffinity(0))
    keeper_cpu, far_cpu = cpus[1], cpus[-1]
    print("\n".join(_topology()))
    print(f"timekeeper on cpu{keeper_cpu}; busy@C runs the side on cpu{far_cpu}")

    in_at, out_at, total = slot_layout(SET_BYTES, SET_BYTES)
    path = f"/dev/shm/pkb-neighbours-{os.getpid()}"
    clock = HostClock(spins=HOST_ENGINE_SPINS, stall_s=STALL_S)
    if args.sweep == "sides":
        args.regions = args.sides * args.pool
    paths = [f"{path}-{i}" for i in range(args.regions)]
    for i, one in enumerate(paths):
        clock.region(f"side{i}", SET_BYTES, SET_BYTES, one)
    clock.make_staging(SET_BYTES * args.windows, SET_BYTES * args.windows, path + "-staging", path + "-snap")
    staging = bytearray(os.urandom(SET_BYTES))
    snapshot = bytearray(SET_BYTES)
    me = [sys.executable, os.path.abspath(__file__)]
    side_procs = [subprocess.Popen([*me, "--role", "side", "--path", ",".join(paths), "--host-us", str(args.host_us),
                                    "--set-bytes", str(SET_BYTES)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                  for _ in range(args.sides if args.sweep == "sides" else 1)]
    busy_proc = subprocess.Popen([*me, "--role", "busy"])
    busy_proc.send_signal(signal.SIGSTOP)
    for side_proc in side_procs:
        if side_proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the side did not start")
    os.sched_setaffinity(0, {keeper_cpu})  # only now: the side started on every CPU
    epoch = 0

    def batch(side_cpu: int, busy_cpu: int | None, mode: str, opening: str, index: int = 0,
              process: int = 0, engine: str = "ce", cycles: int = 0) -> list[float]:
        nonlocal epoch
        side_proc = side_procs[process]
        region = clock.regions[f"side{index}"][0]
        _pin(side_proc.pid, side_cpu)
        if busy_cpu is not None:
            _pin(busy_proc.pid, busy_cpu)
            busy_proc.send_signal(signal.SIGCONT)
        side_proc.stdin.write(f"{epoch} {args.windows} {mode} {index} {engine} {cycles}\n")
        side_proc.stdin.flush()
        times = []
        deadline = time.monotonic() + 20
        if opening == "pkb":
            answer = clock.open(f"side{index}", epoch, [SET_BYTES] * args.windows, SET_BYTES, SET_BYTES, deadline)
            if answer["status"] != "ok":
                raise RuntimeError(answer["status"])
            times = [t / 1e3 for t in answer["times_ns"]]
        if opening == "all-queued":  # the whole batch on the stream first (or as much as 0.5 s allows)
            region.queued.wait(epoch + args.windows, time.monotonic() + 0.5, HOST_ENGINE_SPINS)
        closed = time.perf_counter_ns()
        for w in range(args.windows if opening != "pkb" else 0):
            mark = epoch + 1 + w
            if opening == "paced":  # no window sooner than PACE_US after the last one closed
                while time.perf_counter_ns() - closed < PACE_US * 1000:
                    pass
            if not region.queued.wait(mark, deadline, HOST_ENGINE_SPINS):
                raise RuntimeError(f"the side never queued call {w} (its exit status: {side_proc.poll()})")
            t0 = time.perf_counter_ns()
            region.view(in_at, SET_BYTES)[:] = staging
            region.go.write(mark)
            if not region.done.wait(mark, deadline, HOST_ENGINE_SPINS):
                raise RuntimeError("the side never finished")
            snapshot[:] = region.view(out_at, region.used.read())
            closed = time.perf_counter_ns()
            times.append((closed - t0) / 1e3)
        if side_proc.stdout.readline().strip() != "ok":
            raise RuntimeError("the side went away")
        if busy_cpu is not None:
            busy_proc.send_signal(signal.SIGSTOP)
        epoch += args.windows
        return times[1:]

    if args.sweep in ("cpus", "regions"):
        placements = [(f"side@{c}", c, None, "spin", "as-queued") for c in cpus]
        placements += [(f"busy@{c}", far_cpu, c, "spin", "as-queued") for c in cpus if c != far_cpu]
        placements += [(f"side@{c}/block", c, None, "block", "as-queued") for c in cpus if c != keeper_cpu]
    else:
        placements = [(f"{opening}/{host_us:g}us/{gate}", far_cpu, None, f"spin+{gate}:{host_us:g}", opening)
                      for opening in OPENINGS for host_us in (0, 100, 300) for gate in GATES]
    if args.sweep == "regions":
        placements = [(f"region{i}/{gate}/{engine}", far_cpu, None, f"spin+{gate}:0", "pkb", i, 0, engine)
                      for i in range(args.regions) for gate in args.gates.split(",")
                      for engine in args.engines.split(",")]
    if args.sweep == "sides":  # a region of the process's own pool, drawn for each batch
        placements = [(f"process{j}/{gate}/{opening}/{engine}", far_cpu - j, None, f"spin+{gate}:{args.host_us:g}",
                       opening, (j, args.pool), engine)
                      for j in range(args.sides) for gate in args.gates.split(",")
                      for opening in args.openings.split(",") for engine in args.engines.split(",")]
    if args.sweep == "work":
        placements = [(f"{engine}/{cycles}", far_cpu, None, "spin+pkb:0", "pkb", 0, 0, engine, int(cycles))
                      for engine in ("ce", "sm") for cycles in args.cycles.split(",")]
    batch(far_cpu, None, "spin", "as-queued")  # warm-up: the side's first launches and the pages
    found: dict = {name: [] for name, *_ in placements}
    listing = list(placements)  # the work sweep's rows in the order of their work
    for _ in range(args.reps):
        random.shuffle(placements)
        for name, side_cpu, busy_cpu, mode, opening, *index in placements:
            if index and isinstance(index[0], tuple):  # (process, its pool's size), engine
                process, pool = index[0]
                index = [process * pool + random.randrange(pool), process, *index[1:]]
            found[name].append(batch(side_cpu, busy_cpu, mode, opening, *index))
    for side_proc in side_procs:
        side_proc.stdin.close()
        side_proc.wait(timeout=30)
    busy_proc.kill()
    clock.close()
    for name in (*paths, path + "-staging", path + "-snap"):
        os.unlink(name)

    print(f"{'placement':<16} {'median':>8} {'p10':>8} {'p90':>8}   medians by repetition (us)")
    listed = listing if args.sweep == "work" else sorted(
        placements, key=lambda p: (p[4], p[3], p[0].split("@")[0], p[1], p[2] or -1))
    for name, *_ in listed:
        pooled = sorted(t for rep in found[name] for t in rep)
        p10, p90 = pooled[len(pooled) // 10], pooled[len(pooled) * 9 // 10]
        reps = " ".join(f"{statistics.median(rep):6.2f}" for rep in found[name])
        print(f"{name:<16} {statistics.median(pooled):8.2f} {p10:8.2f} {p90:8.2f}   {reps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
