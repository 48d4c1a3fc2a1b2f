#!/usr/bin/env bash
# Third GPU session, fifth call (2xH200): nvshmem4py with the IBGDA header
# shadowed for NVRTC -- the compile diagnosis, the samples at default size, and
# their sweep against NCCL. Carry: .whl (nvshmem4py, cffi, pycparser), .tk.
cd "$(dirname "$0")/.."
BUDGET=250; source benchmarks/gpu_lib.sh
export PYTHONPATH=/tmp/n4py${PYTHONPATH:+:$PYTHONPATH}
t0=$(date +%s)
timeout 60 python3 benchmarks/diag_nvshmem4py.py > $L/diag_n4py.txt 2>&1
echo "== diag_n4py rc=$? $(( $(date +%s) - t0 )) s"
python3 -c "
import re; s = re.sub(r'\x1b\[[0-9;]*m', '', open('/tmp/logs/diag_n4py.txt').read())
i = s.find('----'); print(s[:400] if i < 0 else s[i:i + 2500])"
step n4py 70 run --backend nvshmem4py --size default --measure-perf --timing-mode latency,graph --trials 2 \
     --warmup 10 --iters 30 --timeout 40
TAIL=25 step bench-n4py 100 bench --backend nvshmem4py --no-baselines --sizes 4K,64K,256K,1M,8M,64M,256M \
     --warmup 10 --iters 40 --timeout 45
date -u
tar czf $OUT/logs.tgz -C /tmp logs
