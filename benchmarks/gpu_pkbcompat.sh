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
echo "== run 1"; time pkb run --backend cuda --solutions $T --nproc 2 --trials 3 --out /tmp/r1
echo "== run 2 (new run dir, builds cached)"; time pkb run --backend cuda --solutions $T --nproc 2 --trials 3 --size large --out /tmp/r2
echo "== pkb cache"; for f in $PKB_CACHE_DIR/cuda/*/pkb-ok.json; do python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['name'], d['module'], d['build_seconds'], 's', d['toolchain']['arch'])" $f; done
echo "== tests"; python3 -m pytest -q tests/backends/test_cuda_pkb_helpers.py tests/test_solution_modules.py 2>&1 | tail -3
} 2>&1 | tee $O/gpu_pkbcompat.txt
cp /tmp/r1/records.jsonl $O/run1.jsonl; cp /tmp/r2/records.jsonl $O/run2.jsonl; cp /tmp/tree/pkb-import.json $O/
