#!/usr/bin/env bash
# Run the same benchmarks alternately on two checkouts, in one session, so both meet the
# same neighbours: run_path twice, then b and c once, per tree per round.
#   bench/compare_trees.sh BEFORE_TREE AFTER_TREE OUT_DIR [ROUNDS]
# e.g. git worktree add --detach ../before d0fa7fc && bench/compare_trees.sh ../before . /tmp/cmp
set -u
before=$1 after=$2 out=$3 rounds=${4:-2}
python=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python
mkdir -p "$out"
for round in $(seq "$rounds"); do
  for side in before after; do
    tree=$before; [ "$side" = after ] && tree=$after
    for _ in 1 2; do (cd "$tree" && "$python" -m bench.run_path >> "$out/run_path.$side.txt" 2>&1); done
    (cd "$tree" && "$python" -m bench.b_burst --runs 1 --json "$out/b.$side.$round.json" >> "$out/b.$side.txt" 2>&1)
    (cd "$tree" && "$python" -m bench.c_sustained --runs 1 --json "$out/c.$side.$round.json" >> "$out/c.$side.txt" 2>&1)
  done
done
