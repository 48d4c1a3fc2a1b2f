#!/usr/bin/env bash
# Issues 6 and 9: every problem of the TP/SP pack and of the
# EP/graph/geometric/other pack at default size with --measure-perf on 2xH200,
# reference as candidate (run 2026-11-22, docs/benchmarks/2026-11-22-h200x2-c.md).
# Run from the repository root on the GPU machine: bash benchmarks/gpu_pack_perf.sh
cd "$(dirname "$0")/.."
BUDGET=560; source benchmarks/gpu_lib.sh
P="--size default --measure-perf --timing-mode latency,graph --trials 2 --warmup 10 --iters 30 --timeout 60"
TAIL=20 step pack-tp-sp 240 run --problem 9-20,45,46,76,86 $P
TAIL=30 step pack-ep-graph-other 300 run --problem 24,26-32,49-51,59-70,78,85,87 $P
date -u
tar czf $OUT/logs.tgz -C /tmp logs
