#!/usr/bin/env bash
# HTTP robustness under load while probes run: 128 concurrent connections (the default
# --web.max-connections) with wrk for 30 s against /metrics, with the agent probing a file every
# second. Reports requests, errors (wrk's socket errors and non-2xx answers) and the agent's RSS
# before, during and after; exits 1 on any error.
# Goals (issues 5 and 56): zero errors up to the connection limit, RSS bounded.
# Usage: bench/http_stress.sh [SECONDS] [CONNECTIONS]
set -euo pipefail
SECS=${1:-30}
CONNS=${2:-128}
cd "$(dirname "$0")/.."
source bench/common.sh
need wrk "apt-get install wrk"
build_ours
make_workdir /var/tmp/diskprobe-stress.XXXXXX
cat > "$WORK/config.toml" <<CFG
[defaults]
interval = "1s"
runtime = "200ms"
max_duty_cycle = 0.5
# Busy skip (with its 1 s look at the disk before each run) and yield off: the point is whether
# probes keep their schedule under HTTP load.
skip_busy_above = {}
yield_to_other_io = false
[[targets]]
name = "stress"
path = "$WORK/probe.dat"
size = "64MiB"
profiles = ["randread-4k-qd1", "randread-4k-qd32"]
CFG
PORT=$(free_port)
"$OURS" --config.file="$WORK/config.toml" --web.listen-address="127.0.0.1:$PORT" --log.level=warn &
PID=$!; PIDS+=("$PID")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/metrics" | grep -q 'diskprobe_probe_success' && break; sleep 0.1; done
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$PID/status"; }
hwm() { awk '/^VmHWM:/ {print $2}' "/proc/$PID/status"; }
before=$(rss)
samples=()
( for _ in $(seq "$SECS"); do sleep 1; rss; done ) > "$WORK/rss.txt" &
SAMPLER=$!
out=$(wrk -t2 -c"$CONNS" -d"${SECS}s" --latency "http://127.0.0.1:$PORT/metrics")
wait "$SAMPLER" || true
after=$(rss)
echo "$out" | grep -E 'Requests/sec|requests in|Socket errors|Non-2xx|Latency|99%'
runs=$(curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^diskprobe_probe_runs_total/ && /result="success"/ {s+=$2} END {print s+0}')
errors=$(echo "$out" | awk '/Socket errors/ {gsub(",",""); print $4+$6+$8+$10; f=1} END {if (!f) print 0}')
non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF; f=1} END {if (!f) print 0}')
echo
echo "connections:           $CONNS for ${SECS}s"
echo "socket errors:         $errors"
echo "non-2xx responses:     $non2xx"
echo "successful probe runs: $runs (probes kept running under load)"
echo "RSS KiB:               before $before, during max $(sort -n "$WORK/rss.txt" | tail -1), after $after, peak (VmHWM) $(hwm)"
if [[ "$errors" != 0 || "$non2xx" != 0 ]]; then
  echo "FAIL: $errors socket errors, $non2xx non-2xx responses" >&2
  exit 1
fi
