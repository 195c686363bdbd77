#!/usr/bin/env bash
# Whether a QD1 run on a loop device lands in its fast or its slow mode depends on how the run
# starts, not on diskprobe_exporter's engine: bench/qd1_start.c, a minimal liburing QD1 reader
# with fio's system calls, run straight after its set-up and after a 100 ms pause, interleaved with
# fio and with ours (which pauses engine::SETTLE after its set-up); and paused in a child process
# whose parent checks on it every 10 ms, as fio's main process does; and ours beside another
# process that wakes every 10 ms (fio's parent, imitated from outside our process). Prints every
# run's IOPS and the medians (why: docs/probes.md, "The first I/O is issued 250 ms ...").
#
# Usage: sudo bench/qd1_start.sh [ROUNDS] [SECONDS]   (defaults: 8 rounds of 1 s)
# Needs: root, losetup, fio, gcc and liburing-dev (apt-get install gcc liburing-dev), cargo.
# The tmpfs-backed loop device is detached and the backing file removed on exit.
set -euo pipefail
ROUNDS=${1:-8}
RUNTIME=${2:-1}
cd "$(dirname "$0")/.."
source bench/common.sh
need_root "loop devices"
for tool in fio gcc losetup python3; do need "$tool"; done
[[ -f /usr/include/liburing.h ]] || { echo "liburing.h not found (apt-get install liburing-dev)" >&2; exit 1; }
build_ours
make_workdir /dev/shm/qd1_start.XXXXXX
tmpfs_loop 256
gcc -O2 -Wall -o "$WORK/qd1_start" bench/qd1_start.c -luring

: > "$WORK/runs"
for round in $(seq 1 "$ROUNDS"); do
  printf 'c-no-pause %s\n' "$("$WORK/qd1_start" "$LOOP" "$RUNTIME" 0 | cut -d' ' -f1)" >> "$WORK/runs"
  printf 'c-100ms-pause %s\n' "$("$WORK/qd1_start" "$LOOP" "$RUNTIME" 100 | cut -d' ' -f1)" >> "$WORK/runs"
  printf 'c-pause-parent %s\n' "$("$WORK/qd1_start" "$LOOP" "$RUNTIME" 100 1 | cut -d' ' -f1)" >> "$WORK/runs"
  printf 'ours %s\n' "$("$OURS" probe --target "$LOOP" --engine io_uring --format json \
    --runtime "${RUNTIME}s" --fio "-rw=randread -bs=4k -iodepth=1" \
    | python3 -c 'import json, sys; print(round(json.load(sys.stdin)[0]["iops"]))')" >> "$WORK/runs"
  python3 -c 'import time
while True: time.sleep(0.01)' &
  ticker=$!
  sleep 0.1
  printf 'ours-ticker %s\n' "$("$OURS" probe --target "$LOOP" --engine io_uring --format json \
    --runtime "${RUNTIME}s" --fio "-rw=randread -bs=4k -iodepth=1" \
    | python3 -c 'import json, sys; print(round(json.load(sys.stdin)[0]["iops"]))')" >> "$WORK/runs"
  kill "$ticker"
  wait "$ticker" 2>/dev/null || true
  printf 'fio %s\n' "$(fio --name=qd1 --filename="$LOOP" --direct=1 --ioengine=io_uring --rw=randread \
    --bs=4k --iodepth=1 --time_based --runtime="$RUNTIME" --output-format=json \
    | python3 -c 'import json, sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))')" >> "$WORK/runs"
done
python3 - "$WORK/runs" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, iops = line.split()
    runs.setdefault(who, []).append(int(iops))
for who, v in runs.items():
    print(f"{who:14s} median {statistics.median(v):7.0f} IOPS   runs: {' '.join(map(str, v))}")
PY
