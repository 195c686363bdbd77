#!/usr/bin/env bash
# A busy CPU against a slow disk: the gentle profile (4k random reads, QD1, 200 IOPS) on a loop
# device over a file on the root disk (--direct-io=on), ROUNDS rounds of: quiet, beside 4 and 16
# busy loops at normal priority, and under a CFS quota (the probe and two busy loops in one CPU
# cgroup allowed half a CPU: cpu.cfs_quota_us on cgroup v1, cpu.max on v2). Per run: the probe's
# p50 and p99, the block layer's own time per read over the run (/sys/block/loopN/stat, as the
# agent reads it), the share of the run the probe's threads waited for a CPU, the host's CPU
# pressure over the run (/proc/pressure/cpu), and whether the run is marked starved. Then the
# median per case. A device that really is slower is the FUSE case, in the test harness:
# `DISKPROBE_LONG_TESTS=1 cargo test --test it cpu_wait::a_slow_device_is_not_starved -- --nocapture`.
#
# Usage: sudo bench/cpu_wait.sh [ROUNDS] [SECONDS]     (defaults: 3 rounds of 5 s runs)
#        OURS_BIN=path ...                             (another binary)
# Needs root (a loop device, a CPU cgroup), python3, cargo; loads every core while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
RUNTIME=${2:-5}
source bench/common.sh
need_root "a loop device and a CPU cgroup"
need losetup "util-linux"
if [[ -n "${OURS_BIN:-}" ]]; then OURS=$OURS_BIN; else build_ours; fi
# The backing file on the root disk, not on tmpfs: a real block layer under the loop device.
make_workdir /var/tmp/diskprobe-cpu-wait.XXXXXX
head -c $((256 << 20)) /dev/urandom > "$WORK/backing.img"
LOOP=$(losetup --find --show --direct-io=on "$WORK/backing.img")

# The CPU cgroup of the quota case, removed on exit.
if [[ -d /sys/fs/cgroup/cpu ]]; then
  CG=/sys/fs/cgroup/cpu/diskprobe-cpu-wait.$$
  mkdir "$CG"
  echo 100000 > "$CG/cpu.cfs_period_us"
  echo 50000 > "$CG/cpu.cfs_quota_us"
else
  CG=/sys/fs/cgroup/diskprobe-cpu-wait.$$
  mkdir "$CG"
  echo "50000 100000" > "$CG/cpu.max"
fi
HOGS=()
stop_hogs() {
  for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${HOGS[@]}"; do wait "$p" 2>/dev/null || true; done
  HOGS=()
}
cleanup_cgroup() {
  stop_hogs
  rmdir "$CG" 2>/dev/null || true
}
trap 'cleanup_cgroup; bench_cleanup' EXIT

hogs() {  # N [CGROUP]: N busy loops, in CGROUP when given
  for _ in $(seq 1 "$1"); do
    if [[ -n "${2:-}" ]]; then
      bash -c "echo \$\$ > $2/cgroup.procs; while :; do :; done" &
    else
      bash -c 'while :; do :; done' &
    fi
    HOGS+=($!)
  done
  sleep 0.5
}

RESULTS="$WORK/results.tsv"
probe() {  # CASE [CGROUP]: one run of the gentle profile, one line of figures into $RESULTS
  local json
  if [[ -n "${2:-}" ]]; then
    json=$(bash -c "echo \$\$ > $2/cgroup.procs; exec \"$OURS\" probe --target $LOOP \
      --profile randread-4k-qd1-gentle --runtime ${RUNTIME}s --format json" 2>/dev/null)
  else
    json=$("$OURS" probe --target "$LOOP" --profile randread-4k-qd1-gentle \
      --runtime "${RUNTIME}s" --format json 2>/dev/null)
  fi
  python3 - "$1" "$json" >> "$RESULTS" <<'EOF'
import json, sys
case, text = sys.argv[1:]
r = json.loads(text)[0]
lat = r["latency_seconds"]
dev = r["device_latency_seconds"]
print("\t".join(str(x) for x in [case, lat["p50"] * 1e6, lat["p99"] * 1e6,
      "" if dev is None else dev * 1e6, r["cpu_wait_share"], r["host_cpu_pressure"],
      r["starved"]]))
EOF
  tail -1 "$RESULTS" >&2
}

echo "device: $LOOP over $WORK/backing.img (root disk, --direct-io=on); gentle profile, ${RUNTIME}s runs; $(nproc) CPUs; kernel $(uname -r)" >&2
for round in $(seq 1 "$ROUNDS"); do
  probe quiet
  hogs 4; probe busy-4; stop_hogs
  hogs 16; probe busy-16; stop_hogs
  hogs 2 "$CG"; probe quota-half-cpu "$CG"; stop_hogs
done

python3 - "$RESULTS" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
cases = []
for r in rows:
    if r[0] not in cases:
        cases.append(r[0])
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("| case | runs | probe p50 µs | probe p99 µs | device µs per read | CPU-wait share | host CPU pressure | starved |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for c in cases:
    rs = [r for r in rows if r[0] == c]
    f = lambda i: med([float(r[i]) for r in rs if r[i] not in ("", "None")])
    starved = sum(r[6] == "True" for r in rs)
    print(f"| {c} | {len(rs)} | {f(1):.0f} | {f(2):.0f} | {f(3):.0f} | {f(4):.3f} | {f(5):.3f} | {starved} of {len(rs)} |")
EOF
