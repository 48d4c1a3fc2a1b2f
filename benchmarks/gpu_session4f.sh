#!/usr/bin/env bash
# Fourth GPU session, seventh call (2xH200): torch's profile (--profile) of
# the nvshmem4py all-gather sample in latency mode, to see where its ~430 us
# eager call goes (host steps add up to ~130 us, call 6).
cd "$(dirname "$0")/.."
BUDGET=200; source benchmarks/gpu_lib.sh
nvshmem4py_on_nvshmem38
TAIL=6 step n4py-prof 150 run --backend nvshmem4py --problem 2 --size default --measure-perf --timing-mode latency \
     --trials 1 --warmup 10 --iters 30 --timeout 120 --profile
ls -la $L/n4py-prof-profiles 2>/dev/null | head
date -u
tar czf $OUT/logs.tgz -C /tmp logs
