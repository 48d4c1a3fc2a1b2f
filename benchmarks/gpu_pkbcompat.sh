# On the 2xH200 machine, from the repository root: PKB-style CUDA files (tests/fixtures/gpu/pkb_tree,
# written for pkb) through `pkb import-pkb`, the compile phase and `pkb run --backend cuda`.
set -u
export PYTHONUNBUFFERED=1 PKB_CACHE_DIR=/tmp/pkbcache
./scripts/install-offline >/dev/null
O=${OUT:-/tmp/out}; mkdir -p $O
{
date -u; nvidia-smi -L; nvcc --version | tail -2
echo "== import"; pkb import-pkb tests/fixtures/gpu/pkb_tree --out /tmp/tree
T=/tmp/tree/solutions_cuda_bf16_h100_8_pkbcompat_fixture
echo "== build (cold)"; time pkb build --backend cuda --solutions $T
echo "== build again (outcomes cached)"; time pkb build --backend cuda --solutions $T
echo "== a fresh process loads the built extensions (the lazy one through solution's builder)"
python3 - $T <<'PY'
import sys, time
from pkb_core.defaults import CoreDefaults
from pkb_core.plugins import worker_plugin_manager
from pkb_core.solution import load_module
worker_plugin_manager("cuda", CoreDefaults())
for name in ("3_broadcast", "2_allgather"):
    t = time.perf_counter(); m = load_module(f"{sys.argv[1]}/{name}.py")
    ext = m._ext if m._ext is not None else m._get_ext()
    print(name, ext.__name__, [f for f in dir(ext) if not f.startswith("_")], f"{time.perf_counter() - t:.2f} s")
PY
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
echo "== run 1"; time pkb run --backend cuda --solutions $T --nproc 2 --trials 3 --out /tmp/r1
echo "== run 2 (new run dir, builds cached)"; time pkb run --backend cuda --solutions $T --nproc 2 --trials 3 --size large --out /tmp/r2
fi
echo "== pkb cache"; for f in $PKB_CACHE_DIR/cuda/*/pkb-ok.json; do python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['name'], d['module'], d['build_seconds'], 's', d['toolchain']['arch'])" $f; done
echo "== tests"; python3 -m pytest -q tests/backends/test_cuda_pkb_helpers.py tests/test_solution_modules.py 2>&1 | tail -3
} 2>&1 | tee $O/gpu_pkbcompat.txt
cp /tmp/r1/records.jsonl $O/run1.jsonl 2>/dev/null; cp /tmp/r2/records.jsonl $O/run2.jsonl 2>/dev/null
cp /tmp/tree/pkb-import.json $O/
