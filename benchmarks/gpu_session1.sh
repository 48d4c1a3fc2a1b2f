#!/usr/bin/env bash
# First GPU session: install, calibrate, reference collectives at default size,
# NCCL/symm_mem sweep, and the Triton and CUDA samples. Writes results to $OUT.
set -u
export PYTHONUNBUFFERED=1 PKB_CACHE_DIR=/tmp/pkbcache
cd "$(dirname "$0")/.."
log=$OUT/console.log
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi topo -m
  env | grep -E "NVLS|MULTICAST" ; python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.nccl.version())"
  ./scripts/install-offline
  pkb calibrate --json > $OUT/calibration.json; cat $OUT/calibration.json | head -30
  pkb run --problem collective --backend reference --size default --measure-perf \
      --timing-mode latency,back-to-back,graph --out /tmp/runs/ref
  cp /tmp/runs/ref/records.jsonl $OUT/collective_ref.jsonl
  timeout 240 pkb bench --backend triton --problem collective --sizes 4K,256K,1M,8M,64M,256M --out /tmp/runs/bt > $OUT/bench_triton.txt 2>&1
  cat $OUT/bench_triton.txt
  timeout 240 pkb bench --backend cuda --problem collective --sizes 4K,256K,1M,8M,64M,256M --out /tmp/runs/bc > $OUT/bench_cuda.txt 2>&1
  cat $OUT/bench_cuda.txt
  for d in bt bc; do cp /tmp/runs/$d/records.jsonl $OUT/bench_$d.jsonl 2>/dev/null; done
  grep -h -E "Error|error|Traceback" /tmp/runs/*/logs/*.log | sort | uniq -c | sort -rn | head -30
} > $log 2>&1
tail -c 6000 $log
