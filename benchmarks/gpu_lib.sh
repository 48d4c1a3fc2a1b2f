# Sourced by the gpu_session*.sh scripts (run from the repository root on the
# GPU machine): installs pkb and the carried wheels, seeds the calibration,
# and defines `step` (one bounded pkb command whose log and records are kept
# under $L) and `builds` (cold CUDA/ThunderKittens builds in parallel).
set -u
export PYTHONUNBUFFERED=1 PKB_CACHE_DIR=${PKB_CACHE_DIR:-/tmp/pkbcache} THUNDERKITTENS_ROOT=$PWD/.tk
L=/tmp/logs; mkdir -p $L
./scripts/install-offline >/dev/null
# nvshmem4py (not in the image) and cffi + pycparser (its Numba bindings import cffi).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/n4py .whl/*.whl
if [ -f .carry/pkbcache.tgz ]; then mkdir -p $PKB_CACHE_DIR && tar xzf .carry/pkbcache.tgz -C $PKB_CACHE_DIR; fi
mkdir -p $PKB_CACHE_DIR/calibration
cp docs/benchmarks/data/2026-11-22-h200x2/calibration.json \
   "$PKB_CACHE_DIR/calibration/$(python3 -c 'from pkb_core.calibrate import machine_key; print(machine_key("cuda"))').json"
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
START=$(date +%s); BUDGET=${BUDGET:-570}

step() {  # step NAME SECONDS pkb-args...  (cut to what is left of BUDGET)
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s) left=$(( BUDGET - $(date +%s) + START ))
  (( left < 30 )) && { echo "== $name skipped (no time left)"; return; }
  (( limit > left )) && limit=$left
  timeout $limit pkb "$@" --out /tmp/r-$name > $L/$name.txt 2>&1
  echo "== $name rc=$? $(( $(date +%s) - t0 )) s"
  grep -v "^\[\|^ *$\|sweep: " $L/$name.txt | tail -${TAIL:-22} | cut -c1-160
  cp /tmp/r-$name/records.jsonl $L/$name.jsonl 2>/dev/null
  mkdir -p $L/$name-logs; cp -r /tmp/r-$name/logs/. $L/$name-logs/ 2>/dev/null
  cp -r /tmp/r-$name/profiles $L/$name-profiles 2>/dev/null
}

builds() {  # cold builds of the cuda and parallelkittens samples, in parallel (CPU only)
  for f in backends/cuda/pkb_cuda/samples/[0-9]*.py; do
    timeout 300 python3 backends/cuda/tools/compile_check.py --build "$f" &
  done
  for f in backends/parallelkittens/pkb_parallelkittens/samples/[0-9]*.py; do
    timeout 300 python3 backends/parallelkittens/tools/compile_check.py --build "$f" &
  done
  wait
}

nvshmem4py_on_nvshmem38() {  # nvshmem4py on the carried NVSHMEM 3.8.0 (.carry/nvshmem-3.8.0.txz)
  export PYTHONPATH=/tmp/n4py${PYTHONPATH:+:$PYTHONPATH}
  mkdir -p /tmp/nvshmem38 && tar xJf .carry/nvshmem-3.8.0.txz -C /tmp/nvshmem38
  export PKB_NVSHMEM4PY_HOME=/tmp/nvshmem38/nvidia/nvshmem
}
