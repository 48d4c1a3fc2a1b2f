#!/usr/bin/env bash
# Third GPU session, fourth call (2xH200): nvshmem4py's NVRTC log, the new
# Triton samples 28 and 65 against their references, the all-reduce sweep
# again with the fixed symm_mem two_shot baseline, and the CUDA samples'
# smoke test (odd sizes, offsets, roots, back-to-back calls).
# Carry: .whl, .tk, .carry (the CUDA build cache of call 2).
cd "$(dirname "$0")/.."
BUDGET=330; source benchmarks/gpu_lib.sh
t0=$(date +%s)
PYTHONPATH=/tmp/n4py timeout 60 python3 benchmarks/diag_nvshmem4py.py > $L/diag_n4py.txt 2>&1
echo "== diag_n4py rc=$? $(( $(date +%s) - t0 )) s"
python3 - <<'PY'
import re
s = re.sub(r"\x1b\[[0-9;]*m", "", open("/tmp/logs/diag_n4py.txt").read())
i = s.find("----")
print(s[:300]); print(s[i:i + 3000])
PY
step samples 90 run --backend triton --problem 28,65 --size default --measure-perf --timing-mode latency,graph \
     --trials 3 --warmup 20 --iters 50 --timeout 40
TAIL=30 step bench-ar 70 bench --backend triton --problem 1 --sizes 4K,64K,256K,1M,8M,64M,256M \
     --warmup 10 --iters 40 --timeout 45
t0=$(date +%s)
timeout 90 torchrun --nproc-per-node 2 backends/cuda/tools/gpu_smoke.py > $L/cuda_smoke.txt 2>&1
echo "== cuda_smoke rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\s*$\|OMP_NUM\|\*\*\*\*" $L/cuda_smoke.txt | tail -25 | cut -c1-200
date -u
tar czf $OUT/logs.tgz -C /tmp logs
