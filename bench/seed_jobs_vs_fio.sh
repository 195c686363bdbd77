#!/usr/bin/env bash
# The seed's six fio jobs (docs/probes.md: 4k randwrite and randread QD128, 1M write and read
# QD64, 4k randwrite and randread QD1), each as a one-shot `probe --fio` beside fio's io_uring
# engine, interleaved on one tmpfs-backed loop device; per job the median ratio ours / fio of
# IOPS, CPU per I/O, p50 and p99 latency with a 90% bootstrap interval: bench/qd_sweep.sh at
# these points.
#
# Usage: sudo bench/seed_jobs_vs_fio.sh [PAIRS] [SECONDS]   (defaults: 3 pairs of 3 s)
#        KEEP=runs.tsv ...  OURS_BIN=path ...  MORE=N ...
# Needs: root, losetup, fio, python3, cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
POINTS="randwrite:4k:128 randread:4k:128 write:1M:64 read:1M:64 randwrite:4k:1 randread:4k:1" \
  exec bench/qd_sweep.sh "${1:-3}" "${2:-3}"
