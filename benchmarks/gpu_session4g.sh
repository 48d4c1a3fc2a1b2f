#!/usr/bin/env bash
# Fourth GPU session, eighth call (2xH200): nvshmem4py after keeping one
# Numba stream and one NvshmemStream per CUDA stream (the profile of call 7
# showed ~100 us of host time per call making them): host steps, the samples
# at default size, and the sweep again. Carry: .whl, .carry.
cd "$(dirname "$0")/.."
BUDGET=330; source benchmarks/gpu_lib.sh
nvshmem4py_on_nvshmem38
TAIL=4 step n4py-host 90 run --backend nvshmem4py --problem 2 --solution benchmarks/diag_nvshmem4py_host.py \
     --size default --trials 1 --timeout 60
grep -h "host steps" $L/n4py-host-logs/*.log | cut -c1-400
TAIL=8 step n4py 90 run --backend nvshmem4py --size default --measure-perf --timing-mode latency,graph --trials 2 \
     --warmup 10 --iters 30 --timeout 60
TAIL=45 step bench-n4py 200 bench --backend nvshmem4py --sizes 4K,64K,256K,1M,8M,64M,256M \
     --warmup 10 --iters 40 --timeout 45
date -u
tar czf $OUT/logs.tgz -C /tmp logs
