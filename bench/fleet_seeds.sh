#!/usr/bin/env bash
# The fleet suites on fresh random seeds: how often the peer and baseline rules pass a week of a
# fleet they were not tuned on (deploy/prometheus/scenarios/fleet.py: every fail-slow disk, the
# exactly-2x step among them, named from its deadline to the end; no healthy disk ever named; a
# cohort that shrinks and two tiers of one model). Each seed is one `promtool test rules` run of
# a few minutes; JOBS of them run at once. Prints each seed's result, the failing checks of the
# failures, and the pass rate.
#
# Usage: bench/fleet_seeds.sh [N] [JOBS]     # N random seeds (default 10), JOBS at once (2)
#   SEEDS="5 6 7" bench/fleet_seeds.sh       # these seeds instead
# Needs: promtool (Debian package prometheus), python3.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need promtool "apt-get install prometheus"
need python3
N=${1:-10}
JOBS=${2:-2}
make_workdir /var/tmp/diskprobe-fleet-seeds.XXXXXX
if [[ -n "${SEEDS:-}" ]]; then
  read -ra SEED_LIST <<<"$SEEDS"
else
  # Random seeds above the tuning (1-21) and CI (1001-1003) ones.
  mapfile -t SEED_LIST < <(python3 -c "import random; print('\n'.join(str(random.randrange(10**5, 10**9)) for _ in range($N)))")
fi
run_seed() {
  local seed=$1
  python3 deploy/prometheus/scenarios/generate.py fleet "$seed" "$WORK/$seed.json"
  if promtool test rules "$WORK/$seed.json" >"$WORK/$seed.out" 2>&1; then
    echo "seed $seed: pass"
  else
    echo "seed $seed: FAIL"
    grep -E '^\s+expr:' "$WORK/$seed.out" | sed 's/^/    /' | cut -c1-220 | head -5
  fi
  rm -f "$WORK/$seed.json"
}
export -f run_seed
export WORK
printf '%s\n' "${SEED_LIST[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_seed {}' | tee "$WORK/results"
pass=$(grep -c ': pass$' "$WORK/results" || true)
total=${#SEED_LIST[@]}
echo "--- pass rate: $pass of $total seeds"
