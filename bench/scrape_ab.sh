#!/usr/bin/env bash
# /metrics latency of two builds of the agent, side by side, each with 8 probe files × 6 profiles
# (the set of bench/agent_idle_and_scrape.sh) after its first probe cycle; rounds interleaved,
# uncompressed and with `Accept-Encoding: gzip` (a build without gzip answers uncompressed).
# First the size of one scrape of each build: series (text format) and bytes in every format.
# Use it to check that a change made scrapes cheaper (or did not make them dearer).
#
# Usage: bench/scrape_ab.sh OLD_BINARY NEW_BINARY [ROUNDS]
#   e.g. git worktree add /tmp/old HEAD~1 && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target \
#        cargo build --release --locked) && cargo build --release --locked && \
#        bench/scrape_ab.sh /tmp/old-target/release/diskprobe_exporter target/release/diskprobe_exporter
# Needs: wrk, curl. Probe files go to a temporary directory under /var/tmp (no root needed).
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,10p' "$0" >&2; exit 2; }
BIN_OLD=$(realpath "$1")
BIN_NEW=$(realpath "$2")
ROUNDS=${3:-3}
cd "$(dirname "$0")/.."
source bench/common.sh
need wrk "apt-get install wrk"
need curl
make_workdir /var/tmp/diskprobe-scrape-ab.XXXXXX

declare -A PORT BIN=([old]="$BIN_OLD" [new]="$BIN_NEW")
for who in old new; do
  mkdir -p "$WORK/$who"
  {
    printf '[defaults]\ninterval = "90s"\nruntime = "200ms"\njitter = 0.05\nmax_duty_cycle = 0.2\nsize = "16MiB"\n'
    printf 'profiles = ["randread-4k-qd1", "randread-4k-qd32", "read-1m-qd16", "randwrite-4k-qd1", "randwrite-4k-qd32", "write-1m-qd16"]\n'
    for i in $(seq 1 8); do
      printf '[[targets]]\nname = "t%d"\npath = "%s/t%d.dat"\nallow_writes = true\n' "$i" "$WORK/$who" "$i"
    done
  } > "$WORK/$who.toml"
  PORT[$who]=$(free_port)
  "${BIN[$who]}" --config.file="$WORK/$who.toml" --web.listen-address="127.0.0.1:${PORT[$who]}" \
    --log.level=warn &
  PIDS+=($!)
done

runs() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^diskprobe_probe_runs_total/ && !/skipped/ {s+=$2} END {print s+0}'; }
for who in old new; do
  for _ in $(seq 240); do [[ $(runs "${PORT[$who]}") -ge 48 ]] && break; sleep 0.5; done
done

PROTOBUF='Accept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited'
OPENMETRICS='Accept: application/openmetrics-text;version=1.0.0'
GZIP='Accept-Encoding: gzip'
size() { curl -s -o /dev/null -w '%{size_download} %{content_type}' "${@/#/-H}" "http://127.0.0.1:$PORT_OF/metrics"; }
echo "one scrape after the first probe cycle: series, then bytes and Content-Type per request"
for who in old new; do
  PORT_OF=${PORT[$who]}
  printf '%-4s series (text) %s\n' "$who" "$(curl -s "http://127.0.0.1:$PORT_OF/metrics" | grep -vc '^#')"
  printf '     text %s | gzip %s\n' "$(size)" "$(size "$GZIP")"
  printf '     openmetrics %s | gzip %s\n' "$(size "$OPENMETRICS")" "$(size "$OPENMETRICS" "$GZIP")"
  printf '     protobuf %s | gzip %s\n' "$(size "$PROTOBUF")" "$(size "$PROTOBUF" "$GZIP")"
done

echo "wrk -t1 -c1 -d4s per round, after both agents' first probe cycle"
for round in $(seq 1 "$ROUNDS"); do
  for encoding in identity gzip; do
    for who in old new; do
      printf 'round %d %-4s %-8s ' "$round" "$who" "$encoding"
      header=(); [[ $encoding == gzip ]] && header=(-H "$GZIP")
      wrk -t1 -c1 -d4s --latency "${header[@]}" "http://127.0.0.1:${PORT[$who]}/metrics" \
        | awk '$1=="50%" {printf "p50 %s  ", $2} $1=="99%" {printf "p99 %s  ", $2} /^Requests\/sec/ {print "scrapes/s", $2}'
    done
  done
done
