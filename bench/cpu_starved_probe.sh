#!/usr/bin/env bash
# What a probe measures when the CPU is taken: a QD1 4k random-read run of 700 ms on a
# tmpfs-backed loop device, alone and beside HOGS busy loops at normal priority (default 40, on a
# machine of 2 cores: what a test suite running tests side by side can add up to). Printed per
# run: the I/Os the probe completed, the time its I/Os took as it measured them (I/Os x mean
# latency), and the time the block layer held them (the device's read ticks in
# /sys/block/loopN/stat). Where the probe's time is far above the block layer's, the rest is
# waiting for a CPU: for the loop device's worker to serve the request, for the probe's thread
# to be scheduled to reap it (io_uring posts a block-device completion from the submitting
# task) and to submit the next.
#
# Usage: bench/cpu_starved_probe.sh [HOGS] [RUNS]
# Needs root (a loop device) and a tmpfs at /dev/shm; it loads every core while the hogs run.
set -euo pipefail
cd "$(dirname "$0")/.."
HOGS=${1:-40}
RUNS=${2:-5}
source bench/common.sh
need_root "a loop device"
need losetup "util-linux"
build_ours
make_workdir /dev/shm/diskprobe-starved.XXXXXX
tmpfs_loop 64
NAME=$(basename "$LOOP")

run() {  # LABEL: one probe run, its figures on one line
  local before after out
  before=$(cat "/sys/block/$NAME/stat")
  out=$("$OURS" probe --target "$LOOP" --engine io_uring \
    --fio '-rw=randread -bs=4k -iodepth=1 -runtime=700ms' 2>&1)
  after=$(cat "/sys/block/$NAME/stat")
  python3 - "$1" "$before" "$after" "$out" <<'EOF'
import re, sys
label, before, after, out = sys.argv[1:]
b, a = [list(map(int, s.split())) for s in (before, after)]
ios = int(re.search(r"ios=(\d+)", out).group(1))
avg = float(re.search(r"avg=([\d.]+)", out).group(1))
mx = int(re.search(r"max=(\d+)", out).group(1))
print(f"{label:<9} I/Os {ios:>6}   probe's I/O time {ios * avg / 1000:7.1f} ms"
      f"   block layer {a[3] - b[3]:5d} ms   slowest I/O {mx / 1000:7.1f} ms")
EOF
}

echo "--- $RUNS runs alone, then $RUNS beside $HOGS busy loops (QD1 4k randread, 700 ms, $LOOP on tmpfs)"
for _ in $(seq 1 "$RUNS"); do run alone; done
for _ in $(seq 1 "$HOGS"); do (while :; do :; done) & PIDS+=($!); done
sleep 1
for _ in $(seq 1 "$RUNS"); do run starved; done
