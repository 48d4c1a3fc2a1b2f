"""Experiment: judge-owned gates across processes on one GPU (time-sliced contexts).
torchrun --nproc-per-node 4: ranks 0,1 judges on GPU 0,1; ranks 2,3 sides on GPU 0,1."""
import ctypes, json, os, statistics, sys, time
import torch, torch.distributed as dist
from cuda.bindings import driver as D

def ok(res):
    err = res[0] if isinstance(res, tuple) else res
    if err != D.CUresult.CUDA_SUCCESS:
        raise RuntimeError(str(err))
    return res[1] if isinstance(res, tuple) and len(res) > 1 else None

def wait(stream, ptr, v):
    ok(D.cuStreamWaitValue32(D.CUstream(stream.cuda_stream), D.CUdeviceptr(ptr), v, D.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ))
def write(stream, ptr, v):
    ok(D.cuStreamWriteValue32(D.CUstream(stream.cuda_stream), D.CUdeviceptr(ptr), v, 0))

class Mem:
    def __init__(self, ptr, n): self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3}

rank = int(os.environ["RANK"]); W = 4
judge = rank < 2; gpu = rank % 2
torch.cuda.set_device(gpu); dev = torch.device("cuda", gpu)
torch.empty(1, device=dev)
import datetime, traceback
def log(*a): print(f"[{rank}]", *a, flush=True)
dist.init_process_group("gloo", rank=rank, world_size=W, timeout=datetime.timedelta(seconds=40))
sides = dist.new_group([2, 3], backend="nccl")
judges = dist.new_group([0, 1], backend="gloo")
N = int(os.environ.get("N", "200")); ROUNDS = int(os.environ.get("R", "5"))
S = int(os.environ.get("S", str(4096)))
OP = os.environ.get("OP", "empty")
stream = torch.cuda.Stream(dev)
res = {}
log('start', judge, gpu)
if judge:
    nbytes = 4096 + 4 * S
    base = ok(D.cuMemAlloc(nbytes)); base = int(base)
    ok(D.cuMemsetD8(D.CUdeviceptr(base), 0, nbytes))
    h = ok(D.cuIpcGetMemHandle(D.CUdeviceptr(base)))
    handle = ctypes.string_at(h.getPtr(), 64).hex()
    go, done, hold = base, base + 256, base + 512
    mem = torch.as_tensor(Mem(base, nbytes), device=dev)
    in_slot = mem[4096:4096 + S]; out_slot = mem[4096 + S: 4096 + 2 * S]
    staging = torch.randint(0, 255, (N, S), dtype=torch.uint8, device=dev)
    snap = torch.empty((N, S), dtype=torch.uint8, device=dev)
else:
    handle = None
log('alloc ok')
box = [None] * W
dist.all_gather_object(box, handle)
if not judge:
    raw = bytes.fromhex(box[gpu]); buf = ctypes.create_string_buffer(raw, 64)
    ptr = int(ok(D.cuIpcOpenMemHandle(D.CUipcMemHandle(_ptr=ctypes.addressof(buf)), D.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)))
    go, done = ptr, ptr + 256
    mem = torch.as_tensor(Mem(ptr, 4096 + 4 * S), device=dev)
    in_slot = mem[4096:4096 + S]; out_slot = mem[4096 + S: 4096 + 2 * S]
    x = torch.empty(S // 2, dtype=torch.bfloat16, device=dev)
    def op():
        if OP == "empty": return x
        if OP.startswith("sleep"): torch.cuda._sleep(int(OP[5:])); return x
        if OP == "allreduce": dist.all_reduce(x, group=sides); return x
    log('opened', hex(ptr))
    # warm
    for _ in range(20): op()
    torch.cuda.synchronize()
control = torch.cuda.Stream(dev)
epoch = 0
log('warm ok')
allw = []; own = []
for r in range(ROUNDS + 1):
    dist.barrier()
    if judge:
        with torch.cuda.stream(stream):
            wait(stream, hold, r + 1)
            ev = []
            for w in range(N):
                e = epoch + w + 1
                t0 = torch.cuda.Event(enable_timing=True); t1 = torch.cuda.Event(enable_timing=True)
                t0.record(stream)
                in_slot.copy_(staging[w])
                write(stream, go, e)
                wait(stream, done, e)
                snap[w].copy_(out_slot)
                t1.record(stream)
                ev.append((t0, t1))
    dist.barrier()   # judge enqueued
    if not judge:
        evs = []
        with torch.cuda.stream(stream):
            for w in range(N):
                e = epoch + w + 1
                wait(stream, go, e)
                x.view(torch.uint8).copy_(in_slot)
                a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
                a.record(stream); y = op(); b.record(stream)
                out_slot.copy_(y.view(torch.uint8))
                write(stream, done, e)
                evs.append((a, b))
    dist.barrier()   # side enqueued
    t_open = time.perf_counter()
    if r == 0: log('enqueued')
    if judge:
        with torch.cuda.stream(control):
            write(control, hold, r + 1)
        dl = time.time() + 20
        while not stream.query():
            if time.time() > dl: log('STUCK judge'); os._exit(3)
            time.sleep(0.001)
        host = (time.perf_counter() - t_open) * 1e3
        times = [a.elapsed_time(b) * 1e3 for a, b in ev]
        if r > 0: allw.append(times); res.setdefault("host_ms", []).append(host)
        if OP != 'allreduce': res.setdefault('exact', []).append(bool(torch.equal(snap, staging)))
    else:
        stream.synchronize()
        if r > 0: own.append([a.elapsed_time(b) * 1e3 for a, b in evs])
    epoch += N
out = {"rank": rank, "judge": judge, "op": OP, "S": S}
if judge:
    flat = [t for ts in allw for t in ts]
    q = statistics.quantiles(flat, n=20)
    out.update(median=statistics.median(flat), p5=q[0], p95=q[-1], round_medians=[statistics.median(t) for t in allw], host_ms=res["host_ms"], exact=res.get('exact'))
else:
    flat = [t for ts in own for t in ts]
    out.update(own_median=statistics.median(flat))
print("RESULT", json.dumps(out), flush=True)
dist.barrier()
