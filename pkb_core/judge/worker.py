"""Entry point of a judge rank's process: :func:`main`, also ``python -m pkb_core.judge.worker``.

Forked by the launch's judge zygote, one per rank, once per launch
(:class:`pkb_core.launch.zygotes.JudgeZygote`); its output goes to the launch
log. It dies with the launcher, makes itself non-dumpable, picks its device, connects
to the judge's c10d store (served by the launcher,
:class:`pkb_core.launch.stores.JudgeStore`), builds the judge's real process group,
takes the run secret as its first message (never in the environment or on disk), then
answers commands (:class:`pkb_core.judge.rank.JudgeRank`) until told to exit. What it
shares with a candidate's start is in :mod:`pkb_core.harness.worker_loop`.
"""
from __future__ import annotations

import sys
from pathlib import Path

from pkb_core.harness.worker_loop import begin, connect, ready, serve


def main() -> int:
    from pkb_core.process.sessions import die_with_spawner

    die_with_spawner()  # where spawned by the launcher; forked by the judge zygote, the zygote armed it
    settings = begin("judge")
    from pkb_core.process.channel import WorkerChannel

    channel = WorkerChannel()
    rank, world_size = settings.rank, settings.world_size
    device, timeout, dist = connect(settings)
    host, port = settings.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), world_size, is_master=False, timeout=timeout)
    from pkb_core.confine.lockdown import protect_from_peers
    from pkb_core.contracts.messages import Secret
    from pkb_core.harness.barrier import StoreBarrier
    from pkb_core.judge.rank import JudgeRank

    protect_from_peers()
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, store=dist.PrefixStore("judge", store), rank=rank, world_size=world_size,
                            timeout=timeout, **kwargs)
    if device.type == "cuda":
        _compile_ahead(device)
    secret = Secret.from_json(channel.receive()).secret  # first message: never in the environment or on disk
    handler = JudgeRank(rank=rank, world_size=world_size, device=device, secret=secret,
                        run_dir=Path(settings.run_dir),
                        barrier=StoreBarrier(store, world_size, device, prefix="pkb-timing"), store=store,
                        run_id=settings.run_id, local_world_size=settings.local_world_size,
                        local_rank=settings.local_rank)
    machine = None
    if rank == 0:
        from pkb_core.results.records import machine_info

        machine = machine_info(device)
    ready(channel, machine=machine)
    serve(channel, handler, "judge")
    return 0


def _compile_ahead(device) -> None:
    """pkb's keystream kernel compiled into the judge's Triton cache before the judge says it is
    ready (:func:`pkb_core.harness.keystream_kernel.compile_ahead`): about 5 s the first time on a
    machine, a load from that cache after. Not in a thread beside the judge's work: a launch from
    another thread breaks a CUDA graph being captured (graph mode), and Triton's compile of one
    kernel is not made for two threads. A failure costs only the compile each side then does."""
    try:
        from pkb_core.harness.keystream_kernel import compile_ahead

        compile_ahead(device)
    except Exception as exc:  # noqa: BLE001 - best effort, never the judge's failure
        print(f"pkb: the keystream kernel was not compiled ahead ({exc})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
