#!/bin/bash
# Equal work, before (0befef5: no confirmation reads, no status-first failovers) and after (HEAD), alternating.
set -u
# As it ran, but for one edit: the checkout's own path is written $CHECKOUT (set it to the checkout to rerun).
PY=$CHECKOUT/.venv/bin/python
for round in 1 2; do
  for scenario in burst failover; do
    for side in before after; do
      dir=/tmp/before; [ "$side" = after ] && dir=$CHECKOUT
      (cd "$dir" && $PY benchmarks/scale.py "$scenario" --jobs 1000) > /tmp/cb-$scenario-$side-$round.txt 2>&1
      echo "$(date -u +%H:%M:%S) $scenario $side $round rc=$?"
    done
  done
done
