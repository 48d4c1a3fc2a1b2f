#!/usr/bin/env bash
# Fourth GPU session, tenth call (2xH200): both NVSHMEM backends' samples at
# default and tiny size after the aligned-parts change (call 9 swept 1 MiB and
# up only). Carry: .whl, .carry (as gpu_session4b.sh).
cd "$(dirname "$0")/.."
BUDGET=240; source benchmarks/gpu_lib.sh
TAIL=6 step nvshmem-default 80 run --backend nvshmem --size default --trials 3 --timeout 60
TAIL=6 step nvshmem-tiny 60 run --backend nvshmem --size tiny --trials 3 --timeout 60
nvshmem4py_on_nvshmem38
TAIL=6 step n4py-default 80 run --backend nvshmem4py --size default --trials 3 --timeout 60
date -u
tar czf $OUT/logs.tgz -C /tmp logs
