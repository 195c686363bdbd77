#!/usr/bin/env bash
# The agent with 8 targets × 6 profiles, side by side with node_exporter (default collectors):
#   - RSS of both after the first probe cycles and the same 6 s scrape load each
#     (goal: ours <= 0.5x node_exporter's)
#   - CPU ticks the agent uses while idle between probe cycles, over 20 s (goal: 0)
#   - scrape p99 while probes run (goal: < 5 ms), with wrk (2 connections)
# Targets are probe files in a temporary directory on the disk holding /var/tmp (no root needed).
# Usage: bench/agent_idle_and_scrape.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
find_node_exporter
need wrk "apt-get install wrk"
build_ours
make_workdir /var/tmp/diskprobe-bench.XXXXXX

{
  # Busy skip and yield off: every capacity run must run in the first cycles (on the machine's
  # shared disk they would otherwise be put off, and retried in the idle window).
  printf '[defaults]\ninterval = "90s"\nruntime = "200ms"\njitter = 0.05\nmax_duty_cycle = 0.2\nsize = "16MiB"\n'
  printf 'skip_busy_above = {}\nyield_to_other_io = false\n'
  printf 'profiles = ["randread-4k-qd1", "randread-4k-qd32", "read-1m-qd16", "randwrite-4k-qd1", "randwrite-4k-qd32", "write-1m-qd16"]\n'
  for i in $(seq 1 8); do
    printf '[[targets]]\nname = "t%d"\npath = "%s/t%d.dat"\nallow_writes = true\n' "$i" "$WORK" "$i"
  done
} > "$WORK/config.toml"

OURS_PORT=$(free_port); NODE_PORT=$(free_port)
"$OURS" --config.file="$WORK/config.toml" --web.listen-address="127.0.0.1:$OURS_PORT" --log.level=warn &
PIDS+=($!); OURS_PID=$!
"$NODE" --web.listen-address="127.0.0.1:$NODE_PORT" --log.level=warn 2>/dev/null &
PIDS+=($!); NODE_PID=$!
for port in "$OURS_PORT" "$NODE_PORT"; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null && break; sleep 0.1; done
done

runs() { curl -s "http://127.0.0.1:$OURS_PORT/metrics" | awk '/^diskprobe_probe_runs_total/ && !/result="skipped"/ {s+=$2} END {print s+0}'; }
busy() { curl -s "http://127.0.0.1:$OURS_PORT/metrics" | awk '/^diskprobe_probe_busy_seconds_total/ {s+=$2} END {print s+0}'; }

# Scrape latency while the first cycles run (48 runs of 200 ms, one at a time: ~10 s of probing).
# node_exporter gets the same load, so that both RSS figures are taken after the same treatment.
sleep 1
out=$(wrk -t1 -c2 -d6s --latency "http://127.0.0.1:$OURS_PORT/metrics")
wrk -t1 -c2 -d6s "http://127.0.0.1:$NODE_PORT/metrics" >/dev/null
during_p99=$(awk '$1=="99%" {print $2}' <<<"$out")
during_rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
busy_after_wrk=$(busy)

# Wait until every profile of every target ran once.
for _ in $(seq 120); do
  [[ "$(runs)" -ge 48 ]] && break
  sleep 0.5
done
echo "first cycles done: $(runs) runs; probing was running during the wrk window: busy seconds at its end $busy_after_wrk"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sleep 2
t0=$(ticks "$OURS_PID"); n0=$(ticks "$NODE_PID"); r0=$(runs)
sleep 20
t1=$(ticks "$OURS_PID"); n1=$(ticks "$NODE_PID"); r1=$(runs)
[[ "$r0" == "$r1" ]] || echo "warning: $((r1 - r0)) probe runs happened during the idle window"

rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
O_RSS=$(rss "$OURS_PID"); N_RSS=$(rss "$NODE_PID")
echo
printf '%-44s %12s %14s %8s\n' "" "diskprobe" "node_exporter" "ratio"
printf '%-44s %12d %14d %7.2fx  (goal <= 0.5x)\n' "RSS after probes and scrape load (KiB)" "$O_RSS" "$N_RSS" "$(echo "$O_RSS / $N_RSS" | bc -l)"
printf '%-44s %12d %14d %8s  (goal: ours 0)\n' "CPU ticks over 20 s idle (no scrapes)" "$((t1 - t0))" "$((n1 - n0))" "-"
printf '%-44s %12s %14s %8s  (goal < 5 ms; %s scrapes/s)\n' "scrape p99 while probes run" "$during_p99" "-" "-" "$during_rps"
