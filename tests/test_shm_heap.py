"""The CPU symmetric heap: peers see each other's writes, pads start zeroed, nothing leaks."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pkb_core.symmetric.shm import SHM_DIR


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, run_id, die_after_alloc, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    from pkb_core.symmetric import handle_of, peer_offset
    from pkb_core.symmetric.shm import SharedMemoryHeap

    heap = SharedMemoryHeap(rank, world_size, lambda: dist.barrier(), run_id)
    x = heap.empty((5, 7), torch.float32)
    if die_after_alloc and rank == 1:
        os._exit(3)
    x.fill_(rank + 1)
    handle = handle_of(x)
    assert handle_of(x[2:]) is handle and peer_offset(x[2:]) == 2 * 7 * 4
    pads_zero = all(bool((handle.get_signal_pad(p) == 0).all()) for p in range(world_size))
    handle.barrier()
    seen = [float(handle.get_buffer(p, (5, 7), torch.float32).sum()) for p in range(world_size)]
    # The raw address table agrees with the views.
    table = torch.tensor([handle.buffer_ptrs[p] for p in range(world_size)])
    same_addresses = table.tolist() == [handle.get_buffer(p, (1,), torch.float32).data_ptr() for p in range(world_size)]
    handle.barrier()
    results[rank] = (pads_zero, seen, same_addresses)
    dist.destroy_process_group()


def _leftovers(run_id):
    return [n for n in os.listdir(SHM_DIR) if n.startswith(f"pkb-{run_id}-")]


@pytest.mark.parametrize("world_size", [2, 3])
def test_peers_see_each_others_writes(world_size):
    run_id = f"t{os.getpid()}w{world_size}"
    results = mp.Manager().dict()
    mp.start_processes(_worker, args=(world_size, _free_port(), run_id, False, results), nprocs=world_size,
                       start_method="spawn")
    expected = [35.0 * (p + 1) for p in range(world_size)]
    for rank in range(world_size):
        pads_zero, seen, same_addresses = results[rank]
        assert pads_zero and same_addresses
        assert seen == expected
    assert _leftovers(run_id) == []


def test_no_segment_left_when_a_rank_dies():
    run_id = f"t{os.getpid()}crash"
    with pytest.raises(mp.ProcessExitedException):
        mp.start_processes(_worker, args=(2, _free_port(), run_id, True, {}), nprocs=2, start_method="spawn")
    assert _leftovers(run_id) == []
