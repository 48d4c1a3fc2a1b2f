"""An attack on window mode, on CPU (docs/trust.md, "Window mode's floor"): rank 0 does both ranks'
windows through rank 1's gate region (same folder, same user): no placing, no barrier, no gloo,
and it spins on the gates where pkb's CPU polling sleeps; outputs written straight into both
out_slots, each window padded to PAD_US toward the `harness` window. Against the judge's own
harness side, with a quarter of its cost allowed, it passed at 12-19x in half the CPU runs
(2026-11-28/29); against the reference group's harness batch (8e5a7c0) it is `flagged` in every
run on a quiet 2-core machine (10 of 10), but passed at about 11x in 2 of 4 runs with two busy
loops beside it, where pkb's own harness windows spread from 170 to 900 us. Read it beside 1_allreduce_peer_reads_least.py (about the least an honest call
through pkb's harness costs) and 1_allreduce_honest.py; the command is in docs/trust.md. Each batch
runs on one of its side's pool of gate regions, drawn by each rank's judge apart, so rank 1 tells
rank 0 which is its batch's through a file of their own folder."""
import os

import time

import torch
import torch.distributed as dist

from pkb_core.harness import gates, parcel, windows

PAD_US = 150.0
_peer = {}


def _leaves(tree):
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [x for t in tree for x in _leaves(t)]
    return []


def _run(self, *, epoch, skeletons, call, timeout_s, make_group=None, **_):
    region, deadline, written = self.region, time.monotonic() + timeout_s, []
    rank = dist.get_rank()
    host = region.host
    n_in, n_out = region.in_slot.numel(), region.out_slot.numel()
    out_at = host.size - n_out
    note = os.path.join(os.path.dirname(host.path), "hostile-r1-region")
    if rank == 0:
        while True:  # rank 1's region for this batch, as rank 1 wrote it
            try:
                with open(note) as handle:
                    told_epoch, peer_path = handle.read().split(" ", 1)
                if int(told_epoch) == epoch:
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise windows.WindowTimeout("rank 1 never said where its region is")
            time.sleep(0.0005)
        if (peer_path, host.size) not in _peer:
            _peer[(peer_path, host.size)] = gates.HostRegion(peer_path, host.size, create=False)
        peer = _peer[(peer_path, host.size)]
        p_in, p_out = peer.tensor(gates.HEADER, n_in), peer.tensor(out_at, n_out)
        plan = []
        for w, skeleton in enumerate(skeletons):
            mine = parcel.unpack_from(skeleton, region.in_slot, limits=parcel.TRUSTED, make_group=make_group, copy=False)
            theirs = parcel.unpack_from(skeleton, p_in, limits=parcel.TRUSTED, make_group=make_group, copy=False)
            sk = parcel.pack_into({"out": mine[0], "args": mine}, region.out_slot)  # layout only (overwritten in-window)
            o_mine = parcel.unpack_from(sk, region.out_slot, limits=parcel.TRUSTED, copy=False)
            o_peer = parcel.unpack_from(sk, p_out, limits=parcel.TRUSTED, copy=False)
            plan.append((mine[0], theirs[0], o_mine["out"], o_mine["args"][0], o_peer["out"], o_peer["args"][0],
                         parcel.skeleton_end(sk)))
            written.append(sk)
        go, pgo, pq, pu, pd = host.go, peer.go, peer.queued, peer.used, peer.done
        behind = gates.behind
        for w, (a, b, out0, arg0, out1, arg1, end) in enumerate(plan):
            mark = epoch + 1 + w
            host.queued.write(mark)
            pq.write(mark)
            while behind(go.read(), mark):
                pass
            t = time.perf_counter()
            while behind(pgo.read(), mark):
                pass
            torch.add(a, b, out=out0)
            out1.copy_(out0)
            arg0.copy_(a)
            arg1.copy_(b)
            if PAD_US:
                while (time.perf_counter() - t) * 1e6 < PAD_US:
                    pass
            pu.write(end)
            pd.write(mark)
            host.used.write(end)
            host.done.write(mark)
            if time.monotonic() > deadline:
                raise windows.WindowTimeout("late")
    else:
        with open(note + ".new", "w") as handle:
            handle.write(f"{epoch} {host.path}")
        os.replace(note + ".new", note)
        scratch = torch.empty(n_out, dtype=torch.uint8)
        for w, skeleton in enumerate(skeletons):
            mine = parcel.unpack_from(skeleton, region.in_slot, limits=parcel.TRUSTED, make_group=make_group, copy=False)
            written.append(parcel.pack_into({"out": mine[0], "args": mine}, scratch))
        last = epoch + len(skeletons)
        while gates.behind(host.done.read(), last):
            if time.monotonic() > deadline:
                raise windows.WindowTimeout("rank 0 never closed my windows")
            time.sleep(0.002)
    self.host_us, self.collections = None, 0
    return written


windows.WindowSide.run = _run


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
