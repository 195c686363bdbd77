#!/usr/bin/env bash
# What a cgroup v1 blkio read bandwidth cap lets through, per engine and block size: the rate read
# and the bytes the throttle charged (blkio.throttle.io_service_bytes) per byte read. On kernel
# 6.18 the throttle charges an io_uring read of 1 MiB twice, which halves what a 1M capacity probe
# on the io_uring engine measures under such a cap (docs/configuration.md, "Limits: how close am I to my disk's cap?").
#
# Usage: sudo bench/blkio_bps_charge.sh [SECONDS]    (default 3 s per case)
#        CAP_MIB=64 sudo bench/blkio_bps_charge.sh   (the cap, MiB/s; default 64)
# Needs: root, losetup, cgroup v1 blkio, fio, python3, cargo.
#
# The device: a tmpfs-backed loop device whose reads are capped at CAP_MIB MiB/s by a blkio group
# (named after DISKPROBE_TEST_PREFIX, default diskprobe-test). Cases, one after the other, each in
# the group: fio (direct, sequential reads, QD16) with --ioengine=io_uring and libaio at 1 MiB and
# 512 KiB, and our one-shot probe with the read-1m-qd16 profile on each engine.
set -euo pipefail

RUNTIME=${1:-3}
CAP_MIB=${CAP_MIB:-64}
SIZE_MIB=${SIZE_MIB:-1024}
cd "$(dirname "$0")/.."
source bench/common.sh

need_root "loop devices and blkio cgroups"
need fio "apt-get install fio"
need losetup
need python3
[[ -e /sys/fs/cgroup/blkio/blkio.throttle.read_bps_device ]] || { echo "cgroup v1 blkio is not mounted" >&2; exit 1; }
FIO=$(command -v fio)
build_ours

make_workdir /dev/shm/blkio_bps_charge.XXXXXX
CGROUP=/sys/fs/cgroup/blkio/${DISKPROBE_TEST_PREFIX:-diskprobe-test}-bps-charge-$$
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
echo "$MAJMIN $((CAP_MIB << 20))" > "$CGROUP/blkio.throttle.read_bps_device"
echo "device: $LOOP (tmpfs-backed, ${SIZE_MIB} MiB) capped at $CAP_MIB MiB/s of reads; ${RUNTIME}s per case; $("$FIO" --version); kernel $(uname -r)" >&2

# in_cgroup CMD...: runs CMD inside the group from its first instruction.
in_cgroup() {
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CGROUP" "$@"
}
# charged: the bytes the throttle has charged the group for reads of the device so far.
charged() {
  awk -v d="$MAJMIN" '$1 == d && $2 == "Read" { print $3 }' "$CGROUP/blkio.throttle.io_service_bytes"
}

printf '| case | MiB/s read | cap MiB/s | charged bytes per byte read |\n|---|---:|---:|---:|\n'
# row NAME BYTES SECONDS BEFORE: one table line.
row() {
  python3 - "$@" "$(charged)" "$CAP_MIB" <<'PY'
import sys
name, nbytes, seconds, before, after, cap = sys.argv[1:]
nbytes, seconds = float(nbytes), float(seconds)
print(f"| {name} | {nbytes / seconds / 2**20:.1f} | {cap} | {(float(after or 0) - float(before or 0)) / nbytes:.2f} |")
PY
}

for engine in io_uring libaio; do
  for bs in 1m 512k; do
    before=$(charged)
    in_cgroup "$FIO" --name=read --filename="$LOOP" --rw=read --bs="$bs" --iodepth=16 \
      --ioengine="$engine" --direct=1 --time_based --runtime="$RUNTIME" --output-format=json \
      > "$WORK/fio.json"
    read -r nbytes seconds < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["jobs"][0]["read"]; print(j["io_bytes"], j["runtime"] / 1e3)' "$WORK/fio.json")
    row "fio $engine $bs QD16" "$nbytes" "$seconds" "$before"
  done
done
for engine in io_uring psync; do
  before=$(charged)
  in_cgroup "$OURS" probe --target "$LOOP" --profile read-1m-qd16 --engine "$engine" \
    --runtime "${RUNTIME}s" --format json > "$WORK/ours.json"
  read -r nbytes seconds < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; print(r["bytes"], r["elapsed_seconds"])' "$WORK/ours.json")
  row "ours $engine read-1m-qd16" "$nbytes" "$seconds" "$before"
done
