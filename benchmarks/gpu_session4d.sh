#!/usr/bin/env bash
# Fourth GPU session, fifth call (2xH200): the EP/graph/geometric/other pack
# with --measure-perf again, whole, after the fixes of calls 3 and 4 (the
# side-stream check's callable, graph capture agreed between ranks, problem 27
# not graph-timed).
cd "$(dirname "$0")/.."
BUDGET=300; source benchmarks/gpu_lib.sh
P="--size default --measure-perf --timing-mode latency,graph --trials 2 --warmup 10 --iters 30 --timeout 60"
TAIL=32 step pack-ep-graph-other 260 run --problem 24,26-32,49-51,59-70,78,85,87 $P
date -u
tar czf $OUT/logs.tgz -C /tmp logs
