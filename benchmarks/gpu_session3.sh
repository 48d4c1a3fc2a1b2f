#!/usr/bin/env bash
# Third GPU session, first call (2xH200): every backend's samples for
# correctness (and a short timing), the Triton all-gather hang diagnosis, the
# side-stream guard and --profile.
# Every step is bounded; logs and records go to $OUT/logs.tgz.
# Carry: .whl (nvshmem4py-cu13 0.4.1 cp312) and .tk (ThunderKittens include + prototype).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PKB_CACHE_DIR=/tmp/pkbcache THUNDERKITTENS_ROOT=$PWD/.tk
L=/tmp/logs; mkdir -p $L
./scripts/install-offline >/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/n4py .whl/nvshmem4py_cu13-*.whl
mkdir -p $PKB_CACHE_DIR/calibration
cp docs/benchmarks/data/2026-11-22-h200x2/calibration.json \
   "$PKB_CACHE_DIR/calibration/$(python3 -c 'import torch; from pkb_core.calibrate import machine_key; print(machine_key("cuda"))').json"
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader

# Cold CUDA/ThunderKittens builds in parallel on the CPUs while the GPUs work.
( for f in backends/cuda/pkb_cuda/samples/[0-9]*.py; do
    timeout 300 python3 backends/cuda/tools/compile_check.py --build "$f" &
  done
  for f in backends/parallelkittens/pkb_parallelkittens/samples/[0-9]*.py; do
    timeout 300 python3 backends/parallelkittens/tools/compile_check.py --build "$f" &
  done; wait ) > $L/builds.txt 2>&1 &
BUILDS=$!

START=$(date +%s); BUDGET=${BUDGET:-570}
step() {  # step NAME SECONDS pkb-args...  (cut to what is left of BUDGET)
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s) left=$(( BUDGET - $(date +%s) + START ))
  (( left < 30 )) && { echo "== $name skipped (no time left)"; return; }
  (( limit > left )) && limit=$left
  timeout $limit pkb "$@" --out /tmp/r-$name > $L/$name.txt 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t0 )) s"
  grep -v "^\[\|^ *$" $L/$name.txt | tail -22 | cut -c1-160
  cp /tmp/r-$name/records.jsonl $L/$name.jsonl 2>/dev/null
  mkdir -p $L/$name-logs; cp -r /tmp/r-$name/logs/. $L/$name-logs/ 2>/dev/null
  cp -r /tmp/r-$name/profiles $L/$name-profiles 2>/dev/null
}

t0=$(date +%s)
timeout 100 torchrun --nproc-per-node 2 benchmarks/diag_triton_allgather.py > $L/diag.txt 2>&1
echo "== diag rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\s*$" $L/diag.txt | grep -v "^W1" | head -40 | cut -c1-200

P="--measure-perf --timing-mode latency,graph --trials 2 --warmup 5 --iters 20 --timeout 45 --size default"
step triton 150 run --backend triton $P
wait $BUILDS; echo "== builds"; grep -v "^\s*$" $L/builds.txt | grep "ok \|FAIL\|error" | cut -c1-200 | head -30
step cuda 110 run --backend cuda $P
step pk 90 run --backend parallelkittens $P
step nvshmem 90 run --backend nvshmem $P
OLD_PYTHONPATH=${PYTHONPATH:-}; export PYTHONPATH=/tmp/n4py${PYTHONPATH:+:$PYTHONPATH}
step nvshmem4py 90 run --backend nvshmem4py $P
export PYTHONPATH=$OLD_PYTHONPATH
step side 70 run --backend triton --solution tests/fixtures/gpu/1_allreduce_side_stream.py --measure-perf --profile \
     --trials 1 --warmup 3 --iters 10 --timeout 40 --size default
date -u
tar czf $OUT/logs.tgz -C /tmp logs
