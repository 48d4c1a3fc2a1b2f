#!/usr/bin/env bash
# Issue 33's targets on a GPU machine (written for 1xH100, 16 cores; about 6 minutes, 9 with PIECES=1):
#   1. the cuda samples cold through `pkb build` (target: <= 20 s), with the PCH cold and warm,
#      and today's way for comparison (load_inline's own files, no PCH, torch's ninja jobs);
#   2. builds per hour of 16 distinct PKB-style files that build through utils.cuda_helpers,
#      as PKB's published files do (target: >= 1.3x today's), the same two ways;
#   3. NVRTC from source to a loaded kernel (target: < 1 s), and the pieces of one build.
# Run from the repository root: bash benchmarks/compile_cost_gpu.sh; results also under $OUT.
set -u
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
OUT=${OUT:-/tmp/compile-cost-out}
mkdir -p "$OUT"
./scripts/install-offline >/dev/null 2>&1 || { echo install failed; exit 1; }
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc; free -g | head -2
python3 -c "import torch; print('torch', torch.__version__)"; nvcc --version | tail -2 | head -1; git log --oneline -1

fresh() {  # every cache pkb, torch and CuPy keep, empty
  rm -rf /tmp/cc-cache && mkdir -p /tmp/cc-cache
  export PKB_CACHE_DIR=/tmp/cc-cache TORCH_EXTENSIONS_DIR=/tmp/cc-cache/te CUPY_CACHE_DIR=/tmp/cc-cache/cupy
}
build() {  # build NAME [ENV=VALUE...] -- pkb build arguments
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$(date +%s.%N)
  env "${envs[@]}" pkb build --backend cuda --device cuda --json "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.err"
  local rc=$?
  echo "== $name rc=$rc wall $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s ${envs[*]}"
  tail -1 "$OUT/$name.jsonl"
  python3 - "$OUT/$name.jsonl" <<'PY'
import json, sys
rows = [json.loads(l)["build"] for l in open(sys.argv[1]) if l.startswith('{"build"')]
for r in sorted(rows, key=lambda r: r["solution"]):
    print(f"   {r['solution'].rsplit('/', 1)[-1]:32s} {'ok' if r['ok'] else r['verdict']:14s} {r['seconds']:.1f} s"
          + ("" if r["ok"] else "  " + r["message"][:200].replace("\n", " | ")))
PY
  grep -h "^pkb: " "$OUT/$name.err" | sort | uniq -c | head -5
}

# 1. The samples (8 load_inline + 3 NVRTC).
fresh; build samples-cold -- --solutions backends/cuda/pkb_cuda/samples
ls -la $PKB_CACHE_DIR/pch/*/ 2>/dev/null | head -5
rm -rf $PKB_CACHE_DIR/cuda $PKB_CACHE_DIR/builds  # keep only the PCH
build samples-cold-pch-warm -- --solutions backends/cuda/pkb_cuda/samples
# Today's way: $TODAY_SAMPLES (the samples before this change), else main's samples (torch in the .cu,
# pybind11) when git has main, else these samples built as
# load_inline writes them (torch/types.h in every .cu: the .cu sets the pace either way).
TODAY=${TODAY_SAMPLES:-backends/cuda/pkb_cuda/samples}
if [ -z "${TODAY_SAMPLES:-}" ] && git rev-parse -q --verify main >/dev/null 2>&1; then
  rm -rf /tmp/cc-samples-main && mkdir -p /tmp/cc-samples-main
  for f in $(git ls-tree --name-only main backends/cuda/pkb_cuda/samples/); do git show "main:$f" > /tmp/cc-samples-main/$(basename $f); done
  TODAY=/tmp/cc-samples-main
fi
echo "today's samples: $TODAY"
fresh; build samples-cold-today PKB_CUDA_PLAIN_BUILD=1 MAX_JOBS=$(( $(nproc) + 2 )) -- --solutions $TODAY

# 2. Builds per hour of PKB-style files (each its own .cu with torch/extension.h and ATen/cuda/CUDAContext.h).
python3 benchmarks/pkb_style_tree.py /tmp/cc-tree --count 16 --helper
fresh; build tree-new -- --solutions /tmp/cc-tree
fresh; build tree-today PKB_CUDA_PLAIN_BUILD=1 MAX_JOBS=$(( $(nproc) + 2 )) -- --solutions /tmp/cc-tree
python3 - "$OUT" <<'PY'
import json, sys
get = lambda n: json.loads(open(f"{sys.argv[1]}/{n}.jsonl").read().splitlines()[-1])["summary"]["phase"]
new, today = get("tree-new"), get("tree-today")
print(f"builds/hour: new {new['builds_per_hour']}, today {today['builds_per_hour']}, "
      f"ratio {new['builds_per_hour'] / today['builds_per_hour']:.2f} (target >= 1.3)")
PY

# 3. NVRTC from source to a loaded kernel; with PIECES=1 also one build piece by piece (PCH, main.cpp
#    plain/PCH/ops/empty, a .cu with and without torch/types.h: about 3 more minutes).
fresh; python3 benchmarks/compile_cost.py $([ "${PIECES:-0}" = 1 ] && echo --nvrtc || echo --nvrtc-only) \
  --json "$OUT/compile_cost.json"
