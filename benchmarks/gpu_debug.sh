#!/usr/bin/env bash
# Short, bounded GPU checks of each timing mode, keeping the launch logs.
set -u
export PYTHONUNBUFFERED=1 PKB_CACHE_DIR=/tmp/pkbcache
cd "$(dirname "$0")/.."
./scripts/install-offline >/dev/null
for mode in latency back-to-back graph; do
  timeout 110 pkb run --problem 1,5 --size default --measure-perf --warmup 5 --iters 8 --timing-mode $mode \
      --timeout 45 --trials 2 --out /tmp/d-$mode > $OUT/$mode.txt 2>&1
  echo "== $mode rc=$?"; tail -5 $OUT/$mode.txt
  cat /tmp/d-$mode/logs/*.log | grep -v "^\s*$" | tail -60 > $OUT/$mode.log
done
