#!/usr/bin/env bash
# What the bundled rules cost Prometheus at fleet scale, measured on a real Prometheus (Debian's
# 2.42): a week of a simulated fleet scraped every minute (deploy/prometheus/scenarios/fleet.py
# --openmetrics: NODES nodes x 8 disks x 2 gentle profiles, every series the rules read) is
# backfilled into a TSDB (`promtool tsdb create-blocks-from openmetrics`), the recording rules are
# backfilled over the same week (`promtool tsdb create-blocks-from rules`, one pass per tier: a
# rule that reads another recording needs that recording's blocks in place), then Prometheus
# serves the TSDB on 127.0.0.1 and every rule's expression, recording and alerting, is evaluated
# at the end of the week with `stats=all`. Printed per rule: samples read per evaluation
# (totalQueryableSamples), per target-profile pair per minute (accounting for the group's
# interval), peak samples and chunks fetched extrapolated to 5,000 nodes x 8 targets x 2 profiles
# (bench/rules_cost.py says how), and the totals.
#
# Usage: bench/rules_cost.sh [RULES_FILE] [NODES] [DAYS]
#   RULES_FILE defaults to deploy/prometheus/rules.yml; to measure an older version:
#   git show REV:deploy/prometheus/rules.yml > /tmp/old-rules.yml && bench/rules_cost.sh /tmp/old-rules.yml
#   NODES defaults to 2 (32 target-profile pairs; the figures are per pair), DAYS to 7.
# It loads every core for minutes: run it where nothing timing-sensitive runs beside it.
# Needs: prometheus and promtool (Debian package prometheus), python3, curl.
set -euo pipefail
cd "$(dirname "$0")/.."
RULES=$(realpath "${1:-deploy/prometheus/rules.yml}")
NODES=${2:-2}
DAYS=${3:-7}
source bench/common.sh
need prometheus "apt-get install prometheus"
need promtool "apt-get install prometheus"
need curl
make_workdir /var/tmp/diskprobe-rules-cost.XXXXXX

BASE=1704067200  # 2024-01-01T00:00:00Z: the week starts at a midnight
END=$((BASE + DAYS * 86400))
promtool check rules "$RULES" >/dev/null

echo "--- $DAYS days of $NODES nodes x 8 disks x 2 profiles, 1-minute scrapes"
PAIRS=$(python3 deploy/prometheus/scenarios/generate.py openmetrics "$WORK/om" --nodes "$NODES" --base "$BASE" --days "$DAYS")
mkdir -p "$WORK/data"
for f in "$WORK"/om/*.om; do
  promtool tsdb create-blocks-from openmetrics "$f" "$WORK/data" >/dev/null
  rm "$f"
done

PORT=$(free_port)
URL="http://127.0.0.1:$PORT"
PROM_PID=""
start_prometheus() {  # RULE_FILE: serves $WORK/data with the given rules loaded
  printf 'global:\n  evaluation_interval: 1m\nrule_files: ["%s"]\n' "$1" > "$WORK/prometheus.yml"
  prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
    --storage.tsdb.retention.time=3650d --web.listen-address="127.0.0.1:$PORT" \
    --log.level=warn 2>>"$WORK/prometheus.log" &
  PROM_PID=$!
  PIDS+=("$PROM_PID")
  for _ in $(seq 1 600); do
    curl -sf "$URL/-/ready" >/dev/null && return 0
    sleep 0.1
  done
  echo "prometheus did not start:" >&2
  cat "$WORK/prometheus.log" >&2
  exit 1
}
stop_prometheus() {
  kill "$PROM_PID"
  wait "$PROM_PID" 2>/dev/null || true
}

echo "--- recording rules, backfilled tier by tier"
mkdir -p "$WORK/tiers"
echo "groups: []" > "$WORK/empty.yml"
start_prometheus "$RULES"
TIERS=$(python3 bench/rules_cost.py tiers "$URL" "$WORK/tiers")
for k in $(seq 1 "$TIERS"); do
  [[ $k == 1 ]] || start_prometheus "$WORK/empty.yml"
  rm -rf "$WORK/out"
  # Every tier from one path: a group's evaluation times hash its name and file, and rules of a
  # group that read each other's samples must see them at the same times, as in Prometheus.
  # (named relatively, so that the times are the same from one run of this script to the next).
  cp "$WORK/tiers/tier-$k.json" "$WORK/tiers/rules.json"
  (cd "$WORK/tiers" && promtool tsdb create-blocks-from rules --start="$BASE" --end="$END" \
    --url="$URL" --output-dir="$WORK/out" rules.json) >>"$WORK/backfill.log" 2>&1
  stop_prometheus
  if grep -i "level=error\|level=warn" "$WORK/backfill.log"; then exit 1; fi
  if compgen -G "$WORK/out/*" >/dev/null; then mv "$WORK"/out/* "$WORK/data/"; fi
  echo "tier $k: $(python3 -c 'import json,sys; print(sum(len(g["rules"]) for g in json.load(open(sys.argv[1]))["groups"]))' "$WORK/tiers/tier-$k.json") rules"
done

echo "--- every rule's expression at the end of the week ($RULES)"
start_prometheus "$RULES"
python3 bench/rules_cost.py measure "$URL" "$END" "$PAIRS"
stop_prometheus
