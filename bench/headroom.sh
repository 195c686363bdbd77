#!/usr/bin/env bash
# Headroom on real capped disks: runs tests/it/headroom_e2e.rs ROUNDS times and tabulates the figures
# it prints (one column per round, then the median).
#
# Usage: sudo bench/headroom.sh [ROUNDS]    (default 3)
#        sudo ENGINE=prometheus3 bench/headroom.sh [ROUNDS]   # on Prometheus 3.5 instead
# Needs: root, losetup, cgroup v1 blkio, fio, prometheus (Debian's 2.42; with ENGINE=prometheus3,
# Prometheus 3.5 from tests/install-engines.sh), python3, cargo.
#
# The rig (tests/it/headroom_e2e.rs): two loop devices over files on the root filesystem with direct
# I/O, capped by a cgroup v1 blkio group at 3,000 read IOPS each, the second also at 64 MiB/s and
# partitioned; the agent (gentle probe and 4k QD32 capacity probe on both, 1M QD16 on the second)
# and fio inside the group; a real Prometheus scraping every second and evaluating the bundled
# rules with shortened windows. Figures: the measured limits against the caps (the median of the
# capacity runs completed while the disks are idle), each disk's consumed share with fio at 1,000
# and 2,900 IOPS, when DiskprobeNearLimit and the throttling rule came, and the samples each
# headroom rule reads per evaluation (Prometheus' stats=all, at this rig's size and windows).
set -euo pipefail

ROUNDS=${1:-3}
# The test's variant for the engine (tests/it/headroom_e2e.rs has one per engine).
TEST=headroom_e2e::shares_alerts_throttling_and_measured_limits_on_capped_loop_devices
case "${ENGINE:-prometheus2}" in
  prometheus2) ;;
  prometheus3) TEST+=_on_prometheus3 ;;
  *) echo "ENGINE must be prometheus2 or prometheus3" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
source bench/common.sh

need_root "loop devices and blkio cgroups"
need fio "apt-get install fio"
[[ ${ENGINE:-prometheus2} == prometheus3 ]] || need prometheus "apt-get install prometheus"
need python3
[[ -e /sys/fs/cgroup/blkio/blkio.throttle.read_iops_device ]] || { echo "cgroup v1 blkio is not mounted" >&2; exit 1; }
cargo test --locked --quiet --test it --no-run
make_workdir "${TMPDIR:-/tmp}/headroom.XXXXXX"
echo "$ROUNDS rounds of $TEST; $(fio --version); kernel $(uname -r); $(nproc) CPUs" >&2

for round in $(seq 1 "$ROUNDS"); do
  if ! DISKPROBE_TEST_STRICT=1 cargo test --locked --quiet --test it "$TEST" -- --exact --nocapture \
      > "$WORK/out.$round" 2> "$WORK/err.$round"; then
    cat "$WORK/err.$round" >&2
    echo "round $round failed" >&2
    exit 1
  fi
  echo "round $round/$ROUNDS done" >&2
done
grep -h "runs on" "$WORK/err.1" >&2 || true

python3 - "$WORK" "$ROUNDS" <<'PY'
import statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for r in range(1, rounds + 1):
    for line in open(f"{work}/err.{r}"):
        if line.startswith("figure: "):
            what, _, value = line[len("figure: "):].rstrip("\n").rpartition(" = ")
            rows.setdefault(what, []).append(float(value))
print("| figure | " + " | ".join(f"round {r}" for r in range(1, rounds + 1)) + " | median |")
print("|---|" + "---:|" * (rounds + 1))
fmt = lambda v: f"{v:,.3f}".rstrip("0").rstrip(".")
for what, values in rows.items():
    print(f"| {what} | " + " | ".join(fmt(v) for v in values) + f" | {fmt(statistics.median(values))} |")
PY
