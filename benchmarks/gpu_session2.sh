#!/usr/bin/env bash
# Second GPU session: reference collectives at default size twice (3 modes),
# the Triton sweep against NCCL and symm_mem, and the whole pack's self-check.
set -u
export PYTHONUNBUFFERED=1 PKB_CACHE_DIR=/tmp/pkbcache
cd "$(dirname "$0")/.."
./scripts/install-offline >/dev/null
date -u
for i in 1 2; do
  timeout 150 pkb run --problem collective --size default --measure-perf --timing-mode latency,back-to-back,graph \
      --timeout 60 --out /tmp/ref$i > $OUT/ref$i.txt 2>&1
  cp /tmp/ref$i/records.jsonl $OUT/ref$i.jsonl; tail -12 $OUT/ref$i.txt
done
timeout 210 pkb bench --backend triton --sizes 4K,256K,1M,8M,64M,256M --warmup 10 --iters 30 --timeout 60 \
    --out /tmp/bt > $OUT/bench_triton.txt 2>&1
cp /tmp/bt/records.jsonl $OUT/bench_triton.jsonl; grep -v "^[0-9]_" $OUT/bench_triton.txt | tail -62
timeout 170 pkb run --problem all --size default --trials 1 --timeout 60 --out /tmp/pack > $OUT/pack.txt 2>&1
cp /tmp/pack/records.jsonl $OUT/pack.jsonl; grep -v "^\[" $OUT/pack.txt | tail -95
date -u
