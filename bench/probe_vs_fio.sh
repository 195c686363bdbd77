#!/usr/bin/env bash
# diskprobe_exporter's probe engine vs fio 3.33, side by side on the same tmpfs-backed loop device.
#
# Usage: sudo bench/probe_vs_fio.sh [ROUNDS] [SECONDS]   (defaults: 5 rounds of 3 s per run)
#        PIN_CPU=1 sudo bench/probe_vs_fio.sh ...         (run both tools under `taskset -c 1`)
#        ONLY=randread-4k-qd1 sudo bench/probe_vs_fio.sh   (only the cases whose name matches)
#        KEEP=runs.tsv sudo bench/probe_vs_fio.sh         (also keep every run: case, tool, round,
#                                                          IOPS, I/Os, CPU s, mean and p50 ns)
#        OURS_BIN=path/to/diskprobe_exporter sudo bench/probe_vs_fio.sh   (that binary instead of
#                                                          building one, e.g. an earlier commit's)
# Needs: root, losetup, fio, python3, cargo.
#
# Cases: 4k randread QD32 and QD128, 4k randread QD1, 1M read QD16. Every round runs, per case,
# ours (io_uring engine), fio --ioengine=io_uring and fio --ioengine=libaio (otherwise default
# options, direct=1, time_based), interleaved in an order that rotates per round, and the table
# shows medians over the rounds.
# Under the table: per case, the median of the per-round ratios ours / fio io_uring with a 90%
# bootstrap interval, and whether each goal is met, missed or undecided by that interval.
# CPU is whole-process user+system time (getrusage of the child, which includes all its threads
# and, for fio, its job process) divided by the I/Os completed. For the QD1 case both report lat
# percentiles (fio: --lat_percentiles=1), i.e. submission to completion.
# A tmpfs-backed loop device is used because a disk-backed one swings 2x between runs on shared
# machines. The loop device is detached and the backing file removed on exit.
set -euo pipefail

ROUNDS=${1:-5}
RUNTIME=${2:-3}
SIZE_MIB=${SIZE_MIB:-1024}
cd "$(dirname "$0")/.."
source bench/common.sh

need_root "loop devices"
need fio "apt-get install fio"
need losetup
FIO=$(command -v fio)
if [[ -n "${OURS_BIN:-}" ]]; then OURS=$OURS_BIN; else build_ours; fi
PIN=()
[[ -n "${PIN_CPU:-}" ]] && PIN=(taskset -c "$PIN_CPU")

make_workdir /dev/shm/probe_vs_fio.XXXXXX
tmpfs_loop "$SIZE_MIB"
echo "device: $LOOP (tmpfs-backed, ${SIZE_MIB} MiB); $ROUNDS rounds of ${RUNTIME}s; $("$FIO" --version); kernel $(uname -r); $(nproc) CPUs; pinned: ${PIN_CPU:-no}" >&2

# cpu_of CMD...: runs CMD, stdout to $WORK/out, prints the child's user+system CPU seconds.
cpu_of() {
  python3 - "$@" <<'PY'
import os, resource, subprocess, sys
with open(os.environ["OUT"], "wb") as out:
    rc = subprocess.run(sys.argv[1:], stdout=out).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
if rc != 0:
    sys.exit(f"command failed ({rc}): {' '.join(sys.argv[1:])}")
print(f"{r.ru_utime + r.ru_stime:.6f}")
PY
}

RESULTS="$WORK/results.tsv"
: > "$RESULTS"
# name | rw | bs | iodepth
CASES=(
  "randread-4k-qd32 randread 4k 32"
  "randread-4k-qd128 randread 4k 128"
  "randread-4k-qd1 randread 4k 1"
  "read-1m-qd16 read 1M 16"
)

for round in $(seq 1 "$ROUNDS"); do
  for c in "${CASES[@]}"; do
    read -r name rw bs qd <<<"$c"
    [[ -n "${ONLY:-}" && $name != "$ONLY" ]] && continue
    extra=()
    [[ $qd == 1 ]] && extra=(--lat_percentiles=1)

    # The order of the three tools rotates from round to round, so that none always runs right
    # after another case's heaviest run (the VM's idle and wake-up behaviour carries over).
    tools=(ours fio-io_uring fio-libaio)
    shift_by=$(( (round - 1) % 3 ))
    tools=("${tools[@]:shift_by}" "${tools[@]:0:shift_by}")
    for who in "${tools[@]}"; do
      if [[ $who == ours ]]; then
        cpu=$(OUT="$WORK/out" cpu_of "${PIN[@]}" "$OURS" probe --target "$LOOP" --engine io_uring \
          --format json --runtime "${RUNTIME}s" --fio "-rw=$rw -bs=$bs -iodepth=$qd")
        python3 - "$WORK/out" "$name" ours "$cpu" "$round" >>"$RESULTS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
l = r["latency_seconds"]
print("\t".join(map(str, [sys.argv[2], sys.argv[3], sys.argv[5], r["iops"], r["ios"],
                          sys.argv[4], l["mean"] * 1e9, l["p50"] * 1e9])))
PY
      else
        cpu=$(OUT="$WORK/out" cpu_of "${PIN[@]}" "$FIO" --name=bench --filename="$LOOP" --direct=1 \
          --ioengine="${who#fio-}" --rw="$rw" --bs="$bs" --iodepth="$qd" --time_based \
          --runtime="$RUNTIME" "${extra[@]}" --output-format=json)
        python3 - "$WORK/out" "$name" "$who" "$cpu" "$round" >>"$RESULTS" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
lat = j["lat_ns"]
p50 = lat.get("percentile", j["clat_ns"].get("percentile", {})).get("50.000000", 0)
print("\t".join(map(str, [sys.argv[2], sys.argv[3], sys.argv[5], j["iops"], j["total_ios"],
                          sys.argv[4], lat["mean"], p50])))
PY
      fi
    done
    echo "round $round/$ROUNDS: $name done" >&2
  done
done

[[ -n "${KEEP:-}" ]] && cp "$RESULTS" "$KEEP"
python3 - "$RESULTS" <<'PY'
import random, statistics, sys
from collections import defaultdict
rows = defaultdict(list)
by_round = defaultdict(dict)
for line in open(sys.argv[1]):
    case, who, rnd, iops, ios, cpu, mean, p50 = line.split("\t")
    v = (float(iops), float(cpu) / float(ios) * 1e6, float(mean), float(p50))
    rows[(case, who)].append(v)
    by_round[(case, rnd)][who] = v
med = lambda case, who, i: statistics.median(v[i] for v in rows[(case, who)])
cases = list(dict.fromkeys(c for c, _ in rows))
print("| case | ours IOPS | fio io_uring IOPS | IOPS ratio | fio libaio IOPS | ours CPU µs/IO | fio io_uring CPU µs/IO | CPU/IO ratio | ours mean lat µs | fio mean lat µs | mean ratio | ours p50 µs | fio p50 µs | p50 ratio |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in cases:
    o, f = "ours", "fio-io_uring"
    print(f"| {c} | {med(c,o,0):,.0f} | {med(c,f,0):,.0f} | {med(c,o,0)/med(c,f,0):.3f} | {med(c,'fio-libaio',0):,.0f} "
          f"| {med(c,o,1):.2f} | {med(c,f,1):.2f} | {med(c,o,1)/med(c,f,1):.3f} "
          f"| {med(c,o,2)/1e3:.1f} | {med(c,f,2)/1e3:.1f} | {med(c,o,2)/med(c,f,2):.3f} "
          f"| {med(c,o,3)/1e3:.1f} | {med(c,f,3)/1e3:.1f} | {med(c,o,3)/med(c,f,3):.3f} |")
print(f"\nmedians of {len(next(iter(rows.values())))} interleaved runs per engine and case")
# Within a round ours and fio run seconds apart, so their ratio is less exposed to the machine's
# slower swings than the ratio of medians taken over all rounds.
# The bracket is a 90% bootstrap interval of that median (rounds resampled with replacement, fixed
# seed): how far the median could move in another run of the same length. A goal counts as met or
# missed only when the whole interval is on one side of it.
print("\nmedian of the per-round ratios ours / fio io_uring, [90% bootstrap interval], goal:")
rng = random.Random(1)
goals = {0: ("IOPS", 1.0, None), 1: ("CPU/IO", None, 0.9), 2: ("mean", 0.95, 1.05), 3: ("p50", 0.90, 1.10)}
for c in cases:
    pairs = [r for (cc, _), r in by_round.items() if cc == c and "ours" in r and "fio-io_uring" in r]
    print(f"  {c} ({len(pairs)} rounds):")
    for i, (what, lo, hi) in goals.items():
        if i >= 2 and not c.endswith("-qd1"):
            continue  # the latency goals are QD1's
        ratios = [p["ours"][i] / p["fio-io_uring"][i] for p in pairs]
        boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
        a, b = boot[100], boot[1899]
        inside = lambda x: (lo is None or x >= lo) and (hi is None or x <= hi)
        verdict = "met" if inside(a) and inside(b) else "missed" if (hi is not None and a > hi) or (lo is not None and b < lo) else "undecided"
        band = f">= {lo}" if hi is None else f"<= {hi}" if lo is None else f"{lo}..{hi}"
        print(f"    {what:6} {statistics.median(ratios):.3f} [{a:.3f}, {b:.3f}]  goal {band}: {verdict}")
PY
