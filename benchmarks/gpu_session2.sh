#!/usr/bin/env bash
# Second GPU session: reference collectives at default size twice (3 modes),
# the whole pack's self-check at default size, and the Triton sweep against
# NCCL and torch symm_mem. Each step is bounded; results land in $OUT.
set -u
export PYTHONUNBUFFERED=1 PKB_CACHE_DIR=/tmp/pkbcache
cd "$(dirname "$0")/.."
./scripts/install-offline >/dev/null
date -u
ref() {
  timeout 95 pkb run --problem collective --size default --measure-perf --timing-mode latency,back-to-back,graph \
      --timeout 40 --out /tmp/ref$1 > $OUT/ref$1.txt 2>&1
  cp /tmp/ref$1/records.jsonl $OUT/ref$1.jsonl; grep -v "^\[" $OUT/ref$1.txt | tail -11
}
ref 1
timeout 140 pkb run --problem all --size default --trials 1 --timeout 40 --out /tmp/pack > $OUT/pack.txt 2>&1
cp /tmp/pack/records.jsonl $OUT/pack.jsonl; grep -v "^\[" $OUT/pack.txt | tail -92 | cut -c1-150
timeout 150 pkb bench --backend triton --sizes 4K,1M,64M,256M --warmup 10 --iters 30 --timeout 40 \
    --out /tmp/bt > $OUT/bench_triton.txt 2>&1
cp /tmp/bt/records.jsonl $OUT/bench_triton.jsonl; grep -v "sweep:" $OUT/bench_triton.txt | tail -45
ref 2
date -u
