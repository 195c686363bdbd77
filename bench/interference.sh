#!/usr/bin/env bash
# What probing costs the workload beside it: a workload's latency alone and with the agent probing
# the same capped device, interleaved.
#
# Usage: sudo bench/interference.sh [ROUNDS] [SECONDS]    (defaults: 3 rounds of 40 s per run)
#        ONLY='^(default|read-1m-qd16)$' sudo bench/interference.sh ...  (only the rows that match)
#        VARIANT=yield-only sudo bench/interference.sh ...  (skip_busy_above = {}: capacity runs
#                          start whatever the load and only yield; VARIANT=unguarded also sets
#                          yield_to_other_io = false: capacity runs go to their end, as before
#                          the agent had either)
#        KEEP=runs.tsv sudo bench/interference.sh ...       (also keep every run)
#        OURS_BIN=path/to/diskprobe_exporter sudo bench/interference.sh ...   (that binary instead
#                          of building one)
#        RT=1 sudo bench/interference.sh ...   (run the workload and the agent under chrt --fifo 1:
#                          on a shared machine, other processes' CPU load then delays neither)
# Needs: root, losetup, cgroup v1 blkio, fio, python3, curl, cargo.
#
# The device: a tmpfs-backed loop device whose reads are capped at CAP_IOPS (default 3,000) by a
# cgroup v1 blkio throttle, as an EBS gp3 volume is by default. Writes get the same cap, but a
# separate one: blkio v1 throttles reads and writes apart, so on this rig a write probe does not
# take from the reads' cap the way it would on a cloud disk with one IOPS cap.
# The workload: fio, 4k random reads at QD4 (libaio, direct), RATE_IOPS (default 1,000) per
# second, in the same cgroup (it shares the cap), for SECONDS; its latency is fio's `lat`
# (submission to completion) percentiles.
# The agent: in the same cgroup, probing the same device every 10 s (max_duty_cycle = 1, so that
# the schedule is allowed), started 1 s before the workload and stopped after it. One row per
# choice of profiles: `default` is the embedded default's (randread-4k-qd1-gentle and
# randwrite-4k-qd1-gentle), then each built-in profile alone (but etcd-wal, which needs a probe
# file: the target here is the device).
# Every round runs, per row, the workload alone and with the agent, in an order that alternates
# from round to round; the table shows medians over the rounds and the median of the per-round
# ratios with / alone. The goal for `default`: p99 within 10%, p99.9 within 50% of alone.
set -euo pipefail

ROUNDS=${1:-3}
RUNTIME=${2:-40}
CAP_IOPS=${CAP_IOPS:-3000}
RATE_IOPS=${RATE_IOPS:-1000}
SIZE_MIB=${SIZE_MIB:-1024}
VARIANT=${VARIANT:-default}
cd "$(dirname "$0")/.."
source bench/common.sh

need_root "loop devices and blkio cgroups"
need fio "apt-get install fio"
need losetup
need curl
[[ -e /sys/fs/cgroup/blkio/blkio.throttle.read_iops_device ]] || { echo "cgroup v1 blkio is not mounted" >&2; exit 1; }
FIO=$(command -v fio)
if [[ -n "${OURS_BIN:-}" ]]; then OURS=$OURS_BIN; else build_ours; fi

make_workdir /dev/shm/interference.XXXXXX
CGROUP=/sys/fs/cgroup/blkio/${DISKPROBE_TEST_PREFIX:-diskprobe-test}-interference-$$
cleanup() {
  bench_cleanup
  if [[ -d $CGROUP ]]; then
    for pid in $(cat "$CGROUP/cgroup.procs" 2>/dev/null); do echo "$pid" > /sys/fs/cgroup/blkio/cgroup.procs || true; done
    rmdir "$CGROUP" || true
  fi
}
trap cleanup EXIT
tmpfs_loop "$SIZE_MIB"
mkdir "$CGROUP"
MAJMIN=$(cat "/sys/block/$(basename "$LOOP")/dev")
echo "$MAJMIN $CAP_IOPS" > "$CGROUP/blkio.throttle.read_iops_device"
echo "$MAJMIN $CAP_IOPS" > "$CGROUP/blkio.throttle.write_iops_device"
echo "device: $LOOP (tmpfs-backed, ${SIZE_MIB} MiB) capped at $CAP_IOPS read and $CAP_IOPS write IOPS; workload 4k randread QD4 at $RATE_IOPS IOPS for ${RUNTIME}s; $ROUNDS rounds; variant $VARIANT; real-time: ${RT:-no}; $("$FIO" --version); kernel $(uname -r); $(nproc) CPUs" >&2

# in_cgroup CMD...: runs CMD inside the cgroup from its first instruction, in place of the shell
# that calls it (call it in a subshell or in the background: `$!` is then CMD's PID).
RTPFX=()
[[ -n "${RT:-}" ]] && RTPFX=(chrt --fifo 1)
in_cgroup() {
  exec sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CGROUP" "${RTPFX[@]}" "$@"
}

# rows: name | profiles (TOML list)
ROWS=("default \"randread-4k-qd1-gentle\", \"randwrite-4k-qd1-gentle\"")
for p in randread-4k-qd1-gentle randwrite-4k-qd1-gentle randread-4k-qd1 randread-4k-qd32 \
    randread-4k-qd128 read-1m-qd16 read-1m-qd64 randwrite-4k-qd1 randwrite-4k-qd32 \
    randwrite-4k-qd128 write-1m-qd16 write-1m-qd64 write-4k-qd1-fdatasync; do
  ROWS+=("$p \"$p\"")
done

case $VARIANT in
  default) GUARDS="" ;;
  yield-only) GUARDS="skip_busy_above = {}" ;;
  unguarded) GUARDS=$'skip_busy_above = {}\nyield_to_other_io = false' ;;
  *) echo "unknown VARIANT $VARIANT (default, yield-only, unguarded)" >&2; exit 1 ;;
esac

# workload OUT: runs the workload in the cgroup, its fio JSON to OUT.
workload() {
  (in_cgroup "$FIO" --name=workload --filename="$LOOP" --rw=randread --bs=4k --iodepth=4 \
    --ioengine=libaio --direct=1 --rate_iops="$RATE_IOPS" --time_based --runtime="$RUNTIME" \
    --lat_percentiles=1 --percentile_list=50:99:99.9 --output-format=json > "$1")
}

RESULTS="$WORK/results.tsv"
: > "$RESULTS"
# record ROW ROUND WHO FIO_JSON [METRICS]: appends one line to $RESULTS.
record() {
  python3 - "$@" >> "$RESULTS" <<'PY'
import json, sys
row, rnd, who, out = sys.argv[1:5]
lat = json.load(open(out))["jobs"][0]["read"]["lat_ns"]
p = lat["percentile"]
runs = {"success": 0, "skipped": 0, "error": 0, "timeout": 0}
ios = contended = 0.0
if len(sys.argv) > 5:
    for line in open(sys.argv[5]):
        if line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        if name.startswith("diskprobe_probe_runs_total{"):
            runs[name.split('result="')[1].split('"')[0]] += float(value)
        elif name.startswith("diskprobe_ios_total{"):
            ios += float(value)
        elif name.startswith("diskprobe_probe_contended_seconds_total{"):
            contended += float(value)
print("\t".join(map(str, [row, rnd, who, p["50.000000"], p["99.000000"], p["99.900000"], lat["max"],
                          runs["success"], runs["skipped"], runs["error"] + runs["timeout"], ios, contended])))
PY
}

for round in $(seq 1 "$ROUNDS"); do
  for r in "${ROWS[@]}"; do
    read -r name profiles <<<"$r"
    [[ -n "${ONLY:-}" && ! $name =~ $ONLY ]] && continue
    order=(alone with)
    (( round % 2 == 0 )) && order=(with alone)
    for who in "${order[@]}"; do
      if [[ $who == alone ]]; then
        workload "$WORK/fio.json"
        record "$name" "$round" alone "$WORK/fio.json"
        continue
      fi
      port=$(free_port)
      cat > "$WORK/agent.toml" <<EOF
[defaults]
interval = "10s"
max_duty_cycle = 1.0
$GUARDS
[[targets]]
name = "capped"
path = "$LOOP"
profiles = [$profiles]
allow_writes = true
allow_device_writes = true
EOF
      in_cgroup "$OURS" --config.file="$WORK/agent.toml" --web.listen-address="127.0.0.1:$port" \
        --log.level=warn 2>> "$WORK/agent.log" &
      agent=$!
      PIDS+=("$agent")
      sleep 1
      workload "$WORK/fio.json"
      curl -sf "http://127.0.0.1:$port/metrics" > "$WORK/metrics.txt"
      kill "$agent"; wait "$agent" || true
      record "$name" "$round" with "$WORK/fio.json" "$WORK/metrics.txt"
    done
    echo "round $round/$ROUNDS: $name done" >&2
  done
done

[[ -n "${KEEP:-}" ]] && cp "$RESULTS" "$KEEP"
python3 - "$RESULTS" "$VARIANT" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
pairs = defaultdict(dict)
for line in open(sys.argv[1]):
    row, rnd, who, p50, p99, p999, mx, ok, skipped, failed, ios, contended = line.rstrip("\n").split("\t")
    v = dict(p50=float(p50), p99=float(p99), p999=float(p999), max=float(mx), ok=float(ok),
             skipped=float(skipped), failed=float(failed), ios=float(ios), contended=float(contended))
    runs[(row, who)].append(v)
    pairs[(row, rnd)][who] = v
med = lambda row, who, k: statistics.median(v[k] for v in runs[(row, who)])
def ratio(row, k):
    rs = [p["with"][k] / p["alone"][k] for (r, _), p in pairs.items() if r == row and len(p) == 2]
    return statistics.median(rs), len(rs)
us = lambda ns: f"{ns / 1e3:,.0f} µs" if ns < 1e6 else f"{ns / 1e6:,.1f} ms"
rows = list(dict.fromkeys(r for r, _ in runs))
print(f"variant: {sys.argv[2]}\n")
print("| agent profiles | p99 alone | p99 with | p99 ratio | p99.9 alone | p99.9 with | p99.9 ratio | max with | probe runs ok / skipped / failed | probe I/Os | contended s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
for row in rows:
    r99, n = ratio(row, "p99")
    r999, _ = ratio(row, "p999")
    goal = ""
    if row == "default":
        goal = " (goal ≤ 1.10: " + ("met" if r99 <= 1.10 else "missed") + ")"
        goal999 = " (goal ≤ 1.50: " + ("met" if r999 <= 1.50 else "missed") + ")"
    else:
        goal999 = ""
    print(f"| {row} | {us(med(row, 'alone', 'p99'))} | {us(med(row, 'with', 'p99'))} | {r99:.2f}{goal} "
          f"| {us(med(row, 'alone', 'p999'))} | {us(med(row, 'with', 'p999'))} | {r999:.2f}{goal999} "
          f"| {us(med(row, 'with', 'max'))} "
          f"| {med(row, 'with', 'ok'):.0f} / {med(row, 'with', 'skipped'):.0f} / {med(row, 'with', 'failed'):.0f} "
          f"| {med(row, 'with', 'ios'):,.0f} | {med(row, 'with', 'contended'):.2f} |")
print(f"\nmedians over {n} interleaved pairs per row (workload alone, then with the agent, order alternating per round);"
      " ratios are the median of the per-pair ratios with / alone")
PY
