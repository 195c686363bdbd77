#!/usr/bin/env bash
# The probe engine against fio 3.33 across queue depths, interleaved on one tmpfs-backed loop
# device: 4k randread and randwrite, 1M read and write, at QD 1, 2, 4, 8, 16, 24, 32, 48, 64, 128.
# Per point: the median ratio ours / fio of IOPS, CPU per I/O, p50 and p99 latency, with a 90%
# bootstrap interval and a verdict per goal (bench/fio_pairs.py says how; an undecided point is
# run again with more pairs).
#
# Usage: sudo bench/qd_sweep.sh [PAIRS] [SECONDS]     (defaults: 3 pairs of 2 s per point)
#        ENGINE=psync sudo bench/qd_sweep.sh          (psync against fio's psync, QD1 only)
#        DEPTHS="8 16" WORKLOADS="randread:4k" ...   (a part of the sweep)
#        MORE=6 ...                                   (extra pairs for an undecided point; 4)
#        POINTS="randread:4k:8 read:1M:64" ...        (exactly these points, RW:BS:QD)
#        KEEP=runs.tsv ...  OURS_BIN=path ...          (keep every run; another binary)
# Needs: root, losetup, fio, python3, cargo.
set -euo pipefail

PAIRS=${1:-3}
RUNTIME=${2:-2}
SIZE_MIB=${SIZE_MIB:-1024}
ENGINE=${ENGINE:-io_uring}
cd "$(dirname "$0")/.."
source bench/common.sh

need_root "loop devices"
need fio "apt-get install fio"
need losetup
if [[ -n "${OURS_BIN:-}" ]]; then OURS=$OURS_BIN; else build_ours; fi
if [[ $ENGINE == psync ]]; then DEFAULT_DEPTHS="1"; else DEFAULT_DEPTHS="1 2 4 8 16 24 32 48 64 128"; fi
DEPTHS=${DEPTHS:-$DEFAULT_DEPTHS}
WORKLOADS=${WORKLOADS:-randread:4k randwrite:4k read:1M write:1M}

make_workdir /dev/shm/fio_pairs.XXXXXX
tmpfs_loop "$SIZE_MIB"
echo "device: $LOOP (tmpfs-backed, ${SIZE_MIB} MiB); engine $ENGINE; $PAIRS pairs of ${RUNTIME}s per point; $(fio --version); kernel $(uname -r); $(nproc) CPUs" >&2

points=()
if [[ -n "${POINTS:-}" ]]; then
  for p in $POINTS; do points+=(--point "$p"); done
else
  for w in $WORKLOADS; do for qd in $DEPTHS; do points+=(--point "$w:$qd"); done; done
fi
python3 bench/fio_pairs.py --device "$LOOP" --ours "$OURS" --engine "$ENGINE" --pairs "$PAIRS" \
  --runtime "$RUNTIME" --more "${MORE:-4}" ${KEEP:+--keep "$KEEP"} "${points[@]}"
