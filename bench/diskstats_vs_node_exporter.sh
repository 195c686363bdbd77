#!/usr/bin/env bash
# Scrape throughput, latency, CPU and memory of diskprobe_exporter vs node_exporter (diskstats
# only), side by side on the same generated 100-device /proc/diskstats fixture, uncompressed and
# with gzip (`Accept-Encoding: gzip`, as Prometheus asks; both exporters then compress).
# wrk loads each with 8 connections; under that load our agent answers the requests that arrive
# while a scrape runs from one shared next scrape (src/coalesce.rs), so its scrapes/s counts
# answers, not gathers. The "1 conn" rows load each with one connection, one scrape at a time (as
# Prometheus scrapes a target): what a scrape costs on its own.
#
# Usage: bench/diskstats_vs_node_exporter.sh [ROUNDS] [SECONDS]   (defaults: 5 rounds of 5 s)
#   BASELINE=/path/to/an/older/diskprobe_exporter adds that build, uncompressed, to every round,
#   to compare today's p99 with it (e.g. one built from main before a change; see scrape_ab.sh).
# Needs: wrk, prometheus-node-exporter (Debian packages), cargo.
# Runs are interleaved (ours, theirs, ours, ...) and medians reported, because the machine is
# shared and noisy. Both servers listen on 127.0.0.1 only and are stopped on exit.
set -euo pipefail

ROUNDS=${1:-5}
SECONDS_PER_RUN=${2:-5}
DEVICES=100
cd "$(dirname "$0")/.."
source bench/common.sh

find_node_exporter
need wrk "apt-get install wrk"
build_ours
make_workdir "${TMPDIR:-/tmp}/diskprobe-diskstats.XXXXXX"

mkdir -p "$WORK/proc" "$WORK/sys" "$WORK/udev"
python3 - "$WORK/proc/diskstats" "$DEVICES" <<'PY'
import random, string, sys
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(42)
names = []
for a in " " + string.ascii_lowercase:
    for b in string.ascii_lowercase:
        names.append(("sd" + a + b).replace(" ", ""))
with open(path, "w") as f:
    for i, name in enumerate(names[:n]):
        vals = [rng.randrange(0, 2**40) for _ in range(17)]
        vals[8] = rng.randrange(0, 64)
        f.write("%4d %7d %s %s\n" % (8 + i // 16, (i % 16) * 16, name, " ".join(map(str, vals))))
PY
printf '[diskstats]\n' > "$WORK/config.toml"

OURS_PORT=$(free_port); NODE_PORT=$(free_port)

"$OURS" --config.file="$WORK/config.toml" --path.procfs="$WORK/proc" --path.sysfs="$WORK/sys" \
  --web.listen-address="127.0.0.1:$OURS_PORT" --log.level=warn &
PIDS+=($!); OURS_PID=$!
"$NODE" --path.procfs="$WORK/proc" --path.sysfs="$WORK/sys" --path.udev.data="$WORK/udev" \
  --collector.disable-defaults --collector.diskstats --web.listen-address="127.0.0.1:$NODE_PORT" \
  --log.level=warn 2>/dev/null &
PIDS+=($!); NODE_PID=$!
PORTS=("$OURS_PORT" "$NODE_PORT")
if [[ -n "${BASELINE:-}" ]]; then
  BASE_PORT=$(free_port)
  "$BASELINE" --config.file="$WORK/config.toml" --path.procfs="$WORK/proc" --path.sysfs="$WORK/sys" \
    --web.listen-address="127.0.0.1:$BASE_PORT" --log.level=warn &
  PIDS+=($!); BASE_PID=$!
  PORTS+=("$BASE_PORT")
fi

for port in "${PORTS[@]}"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null && break; sleep 0.1; done
done
ours_series=$(curl -s "http://127.0.0.1:$OURS_PORT/metrics" | grep -c '^diskprobe_disk_')
node_series=$(curl -s "http://127.0.0.1:$NODE_PORT/metrics" | grep -c '^node_disk_')
echo "fixture: $DEVICES devices; series: ours $ours_series diskprobe_disk_*, node_exporter $node_series node_disk_*"
bytes() { curl -s -o /dev/null -w '%{size_download}' ${2:+-H "$2"} "http://127.0.0.1:$1/metrics"; }
printf 'bytes per scrape: ours %d (gzip %d), node_exporter %d (gzip %d)\n' \
  "$(bytes "$OURS_PORT")" "$(bytes "$OURS_PORT" 'Accept-Encoding: gzip')" \
  "$(bytes "$NODE_PORT")" "$(bytes "$NODE_PORT" 'Accept-Encoding: gzip')"

# CPU seconds (user + system) the process has used so far.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
# run_wrk PORT PID [HEADER]: prints "scrapes/s p99_ms cpu_us_per_scrape"; CONNS connections
# (default 8, on two threads; 1 is one scraper at a time, as Prometheus scrapes a target).
# wrk prints "Requests/sec: N", "N requests in ..." and, with --latency, "99% X(us|ms|s)".
run_wrk() {
  local before after out
  before=$(cpu_seconds "$2")
  local conns=${CONNS:-8}
  out=$(wrk -t"$(( conns < 2 ? 1 : 2 ))" -c"$conns" -d"${SECONDS_PER_RUN}s" --latency ${3:+-H "$3"} "http://127.0.0.1:$1/metrics")
  after=$(cpu_seconds "$2")
  local rps p99 n
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")
  local errors; errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -z "$errors" ]] || echo "  wrk reported: $errors" >&2
  echo "$rps $p99 $(echo "($after - $before) * 1000000 / $n" | bc -l)"
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

GZIP='Accept-Encoding: gzip'
declare -a O_RPS O_P99 O_CPU N_RPS N_P99 N_CPU OG_RPS OG_P99 OG_CPU NG_RPS NG_P99 NG_CPU B_RPS B_P99
declare -a O1_RPS O1_P99 O1_CPU N1_RPS N1_P99 N1_CPU
for r in $(seq "$ROUNDS"); do
  read -r a b c < <(run_wrk "$OURS_PORT" "$OURS_PID"); O_RPS+=("$a"); O_P99+=("$b"); O_CPU+=("$c")
  read -r d e f < <(run_wrk "$NODE_PORT" "$NODE_PID"); N_RPS+=("$d"); N_P99+=("$e"); N_CPU+=("$f")
  printf 'round %d identity: ours %8.0f scrapes/s p99 %6.2f ms %5.0f us CPU | node_exporter %8.0f scrapes/s p99 %6.2f ms %6.0f us CPU\n' "$r" "$a" "$b" "$c" "$d" "$e" "$f"
  read -r a b c < <(run_wrk "$OURS_PORT" "$OURS_PID" "$GZIP"); OG_RPS+=("$a"); OG_P99+=("$b"); OG_CPU+=("$c")
  read -r d e f < <(run_wrk "$NODE_PORT" "$NODE_PID" "$GZIP"); NG_RPS+=("$d"); NG_P99+=("$e"); NG_CPU+=("$f")
  printf 'round %d gzip:     ours %8.0f scrapes/s p99 %6.2f ms %5.0f us CPU | node_exporter %8.0f scrapes/s p99 %6.2f ms %6.0f us CPU\n' "$r" "$a" "$b" "$c" "$d" "$e" "$f"
  read -r a b c < <(CONNS=1 run_wrk "$OURS_PORT" "$OURS_PID" "$GZIP"); O1_RPS+=("$a"); O1_P99+=("$b"); O1_CPU+=("$c")
  read -r d e f < <(CONNS=1 run_wrk "$NODE_PORT" "$NODE_PID" "$GZIP"); N1_RPS+=("$d"); N1_P99+=("$e"); N1_CPU+=("$f")
  printf 'round %d gzip, 1 connection: ours %8.0f scrapes/s p99 %6.2f ms %5.0f us CPU | node_exporter %8.0f scrapes/s p99 %6.2f ms %6.0f us CPU\n' "$r" "$a" "$b" "$c" "$d" "$e" "$f"
  if [[ -n "${BASELINE:-}" ]]; then
    read -r a b c < <(run_wrk "$BASE_PORT" "$BASE_PID"); B_RPS+=("$a"); B_P99+=("$b")
    printf 'round %d baseline: %8.0f scrapes/s p99 %6.2f ms (identity)\n' "$r" "$a" "$b"
  fi
done
O_RSS=$(rss_kib "$OURS_PID"); N_RSS=$(rss_kib "$NODE_PID")

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
row() { # LABEL OURS NODE FORMAT GOAL
  printf "%-26s %14$4 %14$4 %9.2fx   %s\n" "$1" "$2" "$3" "$(echo "$2 / $3" | bc -l)" "$5"
}
echo
printf '%-26s %14s %14s %10s\n' "median of $ROUNDS" "diskprobe" "node_exporter" "ratio"
row "scrapes/s" "$(median "${O_RPS[@]}")" "$(median "${N_RPS[@]}")" .0f "(goal >= 10x)"
row "scrapes/s, gzip" "$(median "${OG_RPS[@]}")" "$(median "${NG_RPS[@]}")" .0f "(goal >= 10x)"
row "p99 latency (ms)" "$(median "${O_P99[@]}")" "$(median "${N_P99[@]}")" .2f "(goal: ours < 5 ms)"
row "p99 latency (ms), gzip" "$(median "${OG_P99[@]}")" "$(median "${NG_P99[@]}")" .2f ""
row "CPU per answer (us)" "$(median "${O_CPU[@]}")" "$(median "${N_CPU[@]}")" .0f ""
row "CPU per answer (us), gzip" "$(median "${OG_CPU[@]}")" "$(median "${NG_CPU[@]}")" .0f ""
row "1 conn, gzip: scrapes/s" "$(median "${O1_RPS[@]}")" "$(median "${N1_RPS[@]}")" .0f ""
row "1 conn, gzip: p99 (ms)" "$(median "${O1_P99[@]}")" "$(median "${N1_P99[@]}")" .2f ""
row "1 conn, gzip: CPU (us)" "$(median "${O1_CPU[@]}")" "$(median "${N1_CPU[@]}")" .0f ""
row "RSS after load (KiB)" "$O_RSS" "$N_RSS" .0f "(goal <= 0.5x)"
if [[ -n "${BASELINE:-}" ]]; then
  bp=$(median "${B_P99[@]}"); og=$(median "${OG_P99[@]}")
  printf '%-26s %14.0f scrapes/s, p99 %.2f ms; ours with gzip: p99 %.2fx the baseline'"'"'s (goal <= 1.2x)\n' \
    "baseline (identity)" "$(median "${B_RPS[@]}")" "$bp" "$(echo "$og / $bp" | bc -l)"
fi
