#!/usr/bin/env bash
# Fourth GPU session, third call (2xH200): the four problems of the EP pack
# that gpu_pack_perf.sh (call 4 of this session) did not pass with
# --measure-perf, after the fixes: the side-stream check now calls the
# callable bound to the re-check's inputs (28, 29, 70), and graph capture is
# agreed between ranks (27 hung in graph replay).
cd "$(dirname "$0")/.."
BUDGET=300; source benchmarks/gpu_lib.sh
P="--size default --measure-perf --timing-mode latency,graph --trials 2 --warmup 10 --iters 30 --timeout 45"
TAIL=12 step pack-fix 200 run --problem 27,28,29,70 $P
grep -h "Error\|error:" $L/pack-fix-logs/*.log 2>/dev/null | sort | uniq -c | sort -rn | head -6 | cut -c1-300
date -u
tar czf $OUT/logs.tgz -C /tmp logs
