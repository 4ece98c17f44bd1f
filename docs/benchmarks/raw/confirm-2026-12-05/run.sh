#!/bin/bash
# Equal work, before (commit 0befef5: no confirmation reads, no status-first failovers, checked out at BEFORE) and
# after (the tree at AFTER), alternating: two rounds of `scale.py burst` (3 runs each) and `scale.py failover`
# (1 run each), 1,000 jobs of 1 PS + 4 workers. Each side runs its own tree's controller (`python -m controller`
# from that directory); the simulator and benchmarks/scale.py are the same in both trees.
# Usage: run.sh BEFORE_DIR AFTER_DIR OUT_DIR   (python: the venv's, set PY to change it)
set -u
BEFORE=$1 AFTER=$2 OUT=$3
PY=${PY:-$AFTER/.venv/bin/python}
for round in 1 2; do
  for scenario in burst failover; do
    for side in before after; do
      dir=$BEFORE; [ "$side" = after ] && dir=$AFTER
      (cd "$dir" && $PY benchmarks/scale.py "$scenario" --jobs 1000) > "$OUT/$scenario-$side-$round.txt" 2>&1
      echo "$(date -u +%H:%M:%S) $scenario $side $round rc=$?"
    done
  done
done
