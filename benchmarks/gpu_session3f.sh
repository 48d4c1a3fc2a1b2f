#!/usr/bin/env bash
# Third GPU session, last call, on nvidia-h200-x4 (lent late in the session):
# the whole pack's reference self-check at default size and the Triton
# samples, at world size 4. Bounded to what was left of the device time.
cd "$(dirname "$0")/.."
BUDGET=150; source benchmarks/gpu_lib.sh
nvidia-smi topo -m | head -6
TAIL=95 step pack-w4 100 run --problem all --size default --trials 1 --timeout 30
step triton-w4 40 run --backend triton --size default --trials 2 --timeout 30
date -u
tar czf $OUT/logs.tgz -C /tmp logs
