#!/usr/bin/env bash
# Scrape throughput, latency and memory of diskprobe_exporter vs node_exporter (diskstats only),
# side by side on the same generated 100-device /proc/diskstats fixture.
#
# Usage: bench/diskstats_vs_node_exporter.sh [ROUNDS] [SECONDS]   (defaults: 5 rounds of 5 s)
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

for port in "$OURS_PORT" "$NODE_PORT"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null && break; sleep 0.1; done
done
ours_series=$(curl -s "http://127.0.0.1:$OURS_PORT/metrics" | grep -c '^diskprobe_disk_')
node_series=$(curl -s "http://127.0.0.1:$NODE_PORT/metrics" | grep -c '^node_disk_')
echo "fixture: $DEVICES devices; series: ours $ours_series diskprobe_disk_*, node_exporter $node_series node_disk_*"

# wrk prints "Requests/sec: N" and, with --latency, "99% X(us|ms|s)".
run_wrk() {
  local out; out=$(wrk -t2 -c8 -d"${SECONDS_PER_RUN}s" --latency "http://127.0.0.1:$1/metrics")
  local rps p99
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")
  local errors; errors=$(awk '/Non-2xx|Socket errors/ {print}' <<<"$out")
  [[ -z "$errors" ]] || echo "  wrk reported: $errors" >&2
  echo "$rps $p99"
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

declare -a O_RPS O_P99 N_RPS N_P99
for r in $(seq "$ROUNDS"); do
  read -r a b < <(run_wrk "$OURS_PORT"); O_RPS+=("$a"); O_P99+=("$b")
  read -r c d < <(run_wrk "$NODE_PORT"); N_RPS+=("$c"); N_P99+=("$d")
  printf 'round %d: ours %8.0f scrapes/s p99 %6.2f ms | node_exporter %8.0f scrapes/s p99 %6.2f ms\n' "$r" "$a" "$b" "$c" "$d"
done
O_RSS=$(rss_kib "$OURS_PID"); N_RSS=$(rss_kib "$NODE_PID")

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
mo=$(median "${O_RPS[@]}"); mn=$(median "${N_RPS[@]}")
po=$(median "${O_P99[@]}"); pn=$(median "${N_P99[@]}")
echo
printf '%-22s %14s %14s %10s\n' "median of $ROUNDS" "diskprobe" "node_exporter" "ratio"
printf '%-22s %14.0f %14.0f %9.2fx   (goal >= 10x)\n' "scrapes/s" "$mo" "$mn" "$(echo "$mo / $mn" | bc -l)"
printf '%-22s %14.2f %14.2f %9.2fx   (goal: ours < 5 ms)\n' "p99 latency (ms)" "$po" "$pn" "$(echo "$po / $pn" | bc -l)"
printf '%-22s %14d %14d %9.2fx   (goal <= 0.5x)\n' "RSS after load (KiB)" "$O_RSS" "$N_RSS" "$(echo "$O_RSS / $N_RSS" | bc -l)"
