#!/usr/bin/env bash
# Third GPU session, second call (2xH200): nvshmem4py's samples with cffi
# carried, the reference re-runs (problems 30, 61, 63 and the collectives in
# graph and latency mode with their CUDA_GRAPH flags), and the size sweeps of
# the triton, cuda, nvshmem and parallelkittens samples against NCCL.
# Carry: .whl (nvshmem4py-cu13 0.4.1, cffi, pycparser; cp312), .tk (ThunderKittens).
cd "$(dirname "$0")/.."
source benchmarks/gpu_lib.sh
builds > $L/builds.txt 2>&1 &
BUILDS=$!
OLD=${PYTHONPATH:-}; export PYTHONPATH=/tmp/n4py${OLD:+:$OLD}
step nvshmem4py 80 run --backend nvshmem4py --size default --trials 2 --timeout 45
export PYTHONPATH=$OLD
wait $BUILDS; echo "== builds"; grep -c "^ok " $L/builds.txt; grep -A3 "FAIL" $L/builds.txt | head
step ref 100 run --problem 30,61,63,collective --size default --measure-perf --timing-mode graph,latency \
     --trials 2 --warmup 10 --iters 30 --timeout 40
S="--sizes 4K,64K,256K,1M,8M,64M,256M --warmup 10 --iters 40 --timeout 40"
TAIL=70 step bench-triton 150 bench --backend triton $S
TAIL=70 step bench-cuda 120 bench --backend cuda --no-baselines $S
TAIL=30 step bench-nvshmem 60 bench --backend nvshmem --no-baselines $S
TAIL=30 step bench-pk 60 bench --backend parallelkittens --no-baselines $S
(cd $PKB_CACHE_DIR && tar czf $OUT/pkbcache.tgz $(ls cuda/*/pkb-ok.json cuda/*/*.so 2>/dev/null)); ls -la $OUT
date -u
tar czf $OUT/logs.tgz -C /tmp logs
