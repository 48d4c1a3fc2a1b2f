#!/usr/bin/env bash
# Fourth GPU session, sixth call (2xH200): where nvshmem4py's eager calls
# spend their host time (benchmarks/diag_nvshmem4py_host.py).
# Carry: .whl, .carry (as gpu_session4b.sh).
cd "$(dirname "$0")/.."
BUDGET=240; source benchmarks/gpu_lib.sh
nvshmem4py_on_nvshmem38
TAIL=6 step n4py-host 150 run --backend nvshmem4py --problem 2 --solution benchmarks/diag_nvshmem4py_host.py \
     --size default --trials 1 --timeout 120
grep -h "host steps" $L/n4py-host-logs/*.log | cut -c1-400
date -u
tar czf $OUT/logs.tgz -C /tmp logs
