#!/usr/bin/env bash
# Fourth GPU session, second call (2xH200): nvshmem4py on NVSHMEM 3.8.0
# (PKB_NVSHMEM4PY_HOME) after call 4a showed that torch loads its own 3.4.5
# by absolute path at import; the worker now puts the home's wheel root first
# on sys.path while torch imports. Which libraries a worker maps; the samples
# at default size; their sweep against NCCL and torch's symm_mem.
# Carry: .whl (nvshmem4py, cffi, pycparser), .carry (nvshmem-3.8.0.txz).
cd "$(dirname "$0")/.."
BUDGET=420; source benchmarks/gpu_lib.sh
nvshmem4py_on_nvshmem38
H=$PKB_NVSHMEM4PY_HOME
MAPS='import sys; print(sys.argv[1], sorted({l.split()[-1] for l in open("/proc/self/maps") if "nvshmem" in l}) or "none")'
PKB_WORKER_PRELOAD=$H/lib/libnvshmem_host.so.3 python3 -c "import pkb_core.worker, torch; torch.zeros(1, device='cuda'); $MAPS" worker-with-preload 2>&1 | tail -2
TAIL=12 step n4py 150 run --backend nvshmem4py --size default --measure-perf --timing-mode latency,graph --trials 2 \
     --warmup 10 --iters 30 --timeout 90
grep -h "Error\|error:\|Segmentation\|Traceback" $L/n4py-logs/*.log 2>/dev/null | sort | uniq -c | sort -rn | head -8 | cut -c1-300
TAIL=45 step bench-n4py 220 bench --backend nvshmem4py --sizes 4K,64K,256K,1M,8M,64M,256M \
     --warmup 10 --iters 40 --timeout 45
date -u
tar czf $OUT/logs.tgz -C /tmp logs
