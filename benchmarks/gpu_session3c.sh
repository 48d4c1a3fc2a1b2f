#!/usr/bin/env bash
# Third GPU session, third call (2xH200), after the fixes of the second:
# the nvshmem4py compile diagnosis, the side-stream guard (new tail check) on
# the cheating fixture, problem 63's re-check, samples 12/13 (and 28/65 when
# present) timed, and the full size sweeps of triton, cuda, parallelkittens and
# nvshmem against NCCL. Carry: .whl, .tk, .carry (the CUDA build cache of call 2).
cd "$(dirname "$0")/.."
source benchmarks/gpu_lib.sh
builds > $L/builds.txt 2>&1 &   # whatever .carry lacks (ThunderKittens keys include mtimes)
BUILDS=$!
t0=$(date +%s)
PYTHONPATH=/tmp/n4py timeout 60 python3 benchmarks/diag_nvshmem4py.py > $L/diag_n4py.txt 2>&1
echo "== diag_n4py rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\s*$" $L/diag_n4py.txt | head -30 | cut -c1-400
wait $BUILDS; echo "== builds $(grep -c '^ok ' $L/builds.txt) ok"; grep -A3 FAIL $L/builds.txt | head
step side 60 run --backend triton --solution tests/fixtures/gpu/1_allreduce_side_stream.py --measure-perf \
     --trials 1 --warmup 3 --iters 10 --timeout 40 --size default
step p63 50 run --problem 63 --size default --measure-perf --trials 2 --warmup 10 --iters 30 --timeout 40
PROBS=12,13; for p in 28 65; do ls backends/triton/pkb_triton/samples/${p}_*.py >/dev/null 2>&1 && PROBS=$PROBS,$p; done
step samples 80 run --backend triton --problem $PROBS --size default --measure-perf --timing-mode latency,graph \
     --trials 3 --warmup 20 --iters 50 --timeout 40
S="--sizes 4K,64K,256K,1M,8M,64M,256M --warmup 10 --iters 40 --timeout 45"
TAIL=75 step bench-triton 140 bench --backend triton $S
TAIL=60 step bench-cuda 110 bench --backend cuda --no-baselines $S
TAIL=25 step bench-pk 60 bench --backend parallelkittens --no-baselines $S
TAIL=25 step bench-nvshmem 90 bench --backend nvshmem --no-baselines $S
date -u
tar czf $OUT/logs.tgz -C /tmp logs
