#!/usr/bin/env bash
# Fourth GPU session, first call (2xH200): nvshmem4py against NVSHMEM 3.8.0's
# headers and host library (PKB_NVSHMEM4PY_HOME), the rest of the process on
# torch's 3.4.5. Which libnvshmem_host a process maps after `import torch`,
# with and without the worker's preload; the shim compile; the samples at
# default size; their sweep against NCCL.
# Carry: .whl (nvshmem4py, cffi, pycparser), .carry (nvshmem-3.8.0.txz: the
# nvidia-nvshmem-cu13 3.8.0 wheel's include/, libnvshmem_host.so.3 and
# nvshmem_bootstrap_uid.so.3).
cd "$(dirname "$0")/.."
BUDGET=500; source benchmarks/gpu_lib.sh
nvshmem4py_on_nvshmem38
H=$PKB_NVSHMEM4PY_HOME
MAPS='import sys; print(sys.argv[1], sorted({l.split()[-1] for l in open("/proc/self/maps") if "nvshmem" in l}) or "none")'
python3 -c "import torch; $MAPS" after-import-torch 2>&1 | tail -2
python3 -c "import torch; torch.zeros(1, device='cuda'); import torch.distributed._symmetric_memory; $MAPS" after-cuda-init 2>&1 | tail -2
PKB_WORKER_PRELOAD=$H/lib/libnvshmem_host.so.3 python3 -c "import pkb_core.worker, torch; torch.zeros(1, device='cuda'); $MAPS" with-preload 2>&1 | tail -2
t0=$(date +%s)
timeout 90 python3 benchmarks/diag_nvshmem4py.py > $L/diag_n4py.txt 2>&1
echo "== diag_n4py rc=$? $(( $(date +%s) - t0 )) s"
python3 -c "
import re; s = re.sub(r'\x1b\[[0-9;]*m', '', open('/tmp/logs/diag_n4py.txt').read())
i = s.find('----'); print(s[:600] if i < 0 else s[i:i + 2500])"
TAIL=12 step n4py 120 run --backend nvshmem4py --size default --measure-perf --timing-mode latency,graph --trials 2 \
     --warmup 10 --iters 30 --timeout 60
grep -h "unsupported\|error\|Error" $L/n4py.txt | head -5 | cut -c1-400
TAIL=30 step bench-n4py 200 bench --backend nvshmem4py --sizes 4K,64K,256K,1M,8M,64M,256M \
     --warmup 10 --iters 40 --timeout 45
date -u
tar czf $OUT/logs.tgz -C /tmp logs
