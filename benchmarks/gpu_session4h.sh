#!/usr/bin/env bash
# Fourth GPU session, ninth call (2xH200): the NVSHMEM samples after cutting
# their per-program/per-block parts 256 bytes apart (the unrounded cut put
# every get at an odd address; the all-gathers and all-to-alls moved ~45 GB/s
# at 64 MiB). Both NVSHMEM backends' samples swept against NCCL at 1 MiB and up.
# Carry: .whl, .carry (as gpu_session4b.sh).
cd "$(dirname "$0")/.."
BUDGET=420; source benchmarks/gpu_lib.sh
TAIL=16 step bench-nvshmem 170 bench --backend nvshmem --problem 2,8 --no-baselines --sizes 1M,8M,64M,256M \
     --warmup 10 --iters 40 --timeout 60
nvshmem4py_on_nvshmem38
TAIL=30 step bench-n4py 200 bench --backend nvshmem4py --sizes 1M,8M,64M,256M \
     --warmup 10 --iters 40 --timeout 60
date -u
tar czf $OUT/logs.tgz -C /tmp logs
