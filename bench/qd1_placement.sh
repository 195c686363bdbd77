#!/usr/bin/env bash
# Where the loop device's worker serves QD1 I/O, for ours and for fio: per 100 ms of a run, the
# share of I/Os completed on the CPU that issued them ("fast mode": the worker ran on the
# submitting CPU and no idle CPU had to be woken) and how many I/Os completed. Explains why QD1
# latency on a loop device changes from run to run (docs/probes.md).
#
# Usage: sudo bench/qd1_placement.sh [RUNS] [SECONDS]   (defaults: 2 runs of 1 s each, interleaved)
# Needs: root, perf (block and sched tracepoints), losetup, fio, python3, cargo.
# The tmpfs-backed loop device is detached and the backing file removed on exit.
set -euo pipefail
RUNS=${1:-2}
RUNTIME=${2:-1}
cd "$(dirname "$0")/.."
source bench/common.sh
need_root "loop devices, tracepoints"
for tool in perf fio losetup python3; do need "$tool"; done
build_ours
make_workdir /dev/shm/qd1_placement.XXXXXX
tmpfs_loop 256

cat > "$WORK/share.py" <<'PY'
import re, sys
issued, done, t0 = {}, [], None
for line in sys.stdin:
    m = re.match(r"\s*\[(\d+)\]\s+([\d.]+):\s+block:block_rq_(issue|complete):.*?\(\)\s+(\d+) \+", line)
    if not m:
        continue
    cpu, t, kind, sector = int(m[1]), float(m[2]), m[3], m[4]
    if kind == "issue":
        issued[sector] = (cpu, t)
        t0 = t0 if t0 is not None else t
    elif sector in issued:
        icpu, it = issued.pop(sector)
        done.append((int((it - t0) * 10), icpu == cpu))
buckets = {}
for b, same in done:
    n = buckets.setdefault(b, [0, 0])
    n[0] += same
    n[1] += 1
print("  ".join(f"{100 * s // n:3d}%/{n}" for _, (s, n) in sorted(buckets.items()) if n > 10))
PY

echo "per 100 ms: share of I/Os completed on the issuing CPU / I/Os completed"
for run in $(seq 1 "$RUNS"); do
  for who in ours fio; do
    if [[ $who == ours ]]; then
      cmd=("$OURS" probe --target "$LOOP" --engine io_uring --runtime "${RUNTIME}s" --profile randread-4k-qd1)
    else
      cmd=(fio --name=qd1 --filename="$LOOP" --direct=1 --ioengine=io_uring --rw=randread --bs=4k
        --iodepth=1 --time_based --runtime="$RUNTIME")
    fi
    perf record -q -e block:block_rq_issue -e block:block_rq_complete -a -o "$WORK/perf.data" \
      -- "${cmd[@]}" >/dev/null 2>&1
    printf '%-5s %s\n' "$who" "$(perf script -i "$WORK/perf.data" -F cpu,time,event,trace 2>/dev/null \
      | python3 "$WORK/share.py")"
  done
done
