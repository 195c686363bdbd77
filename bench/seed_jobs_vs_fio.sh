#!/usr/bin/env bash
# The seed's six fio jobs (docs/probes.md: 4k randwrite and randread QD128, 1M write and read
# QD64, 4k randwrite and randread QD1), each as a one-shot `probe --fio` beside fio's io_uring
# engine, interleaved on one tmpfs-backed loop device; per job the median ratio ours / fio of
# IOPS, CPU per I/O, p50 and p99 latency with a 90% bootstrap interval (bench/fio_pairs.py).
#
# Usage: sudo bench/seed_jobs_vs_fio.sh [PAIRS] [SECONDS]   (defaults: 3 pairs of 3 s)
#        KEEP=runs.tsv ...  OURS_BIN=path ...  MORE=N ...
# Needs: root, losetup, fio, python3, cargo.
set -euo pipefail

PAIRS=${1:-3}
RUNTIME=${2:-3}
SIZE_MIB=${SIZE_MIB:-1024}
cd "$(dirname "$0")/.."
source bench/common.sh

need_root "loop devices"
need fio "apt-get install fio"
need losetup
if [[ -n "${OURS_BIN:-}" ]]; then OURS=$OURS_BIN; else build_ours; fi

make_workdir /dev/shm/seed_jobs.XXXXXX
tmpfs_loop "$SIZE_MIB"
echo "device: $LOOP (tmpfs-backed, ${SIZE_MIB} MiB); $PAIRS pairs of ${RUNTIME}s per job; $(fio --version); kernel $(uname -r); $(nproc) CPUs" >&2

python3 bench/fio_pairs.py --device "$LOOP" --ours "$OURS" --pairs "$PAIRS" --runtime "$RUNTIME" \
  --more "${MORE:-4}" ${KEEP:+--keep "$KEEP"} \
  --point randwrite:4k:128 --point randread:4k:128 --point write:1M:64 --point read:1M:64 \
  --point randwrite:4k:1 --point randread:4k:1
