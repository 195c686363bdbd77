#!/usr/bin/env bash
# Rate-capped probes against fio 3.33: latency under an IOPS cap, side by side on a loop device
# over a file with direct I/O (`losetup --direct-io=on`): by default a file on the root filesystem,
# so that every read reaches the virtual disk.
#
# Usage: sudo bench/probe_vs_fio_rate.sh [ROUNDS] [SECONDS]   (defaults: 6 rounds of 5 s per run)
#        ONLY=qd1-500 sudo bench/probe_vs_fio_rate.sh         (only the case with that name)
#        ENGINE=psync sudo bench/probe_vs_fio_rate.sh         (ours and fio with the psync engine)
#        KEEP=runs.tsv sudo bench/probe_vs_fio_rate.sh        (also keep every run)
#        OURS_BIN=path/to/diskprobe_exporter sudo bench/...   (that binary instead of building one)
#        BACKING=tmpfs sudo bench/probe_vs_fio_rate.sh        (the backing file on /dev/shm, still
#                                                          with direct I/O: no disk in the way)
# Needs: root, losetup, fio, python3, cargo.
#
# Cases: 4k random reads at QD1 capped at 200 (the gentle default), 500 and 5000 IOPS, and at QD8
# capped at 5000 IOPS.
# Every round runs each case with ours (`--fio '... -rate_iops=N'`) and fio (`--rate_iops=N
# --lat_percentiles=1`, so that its percentiles are of `lat`, submission to completion), in an
# order that alternates per round. The table shows medians over the rounds; under it, per case,
# the median of the per-round ratios ours / fio for the mean and p99 latency, against the goals
# (mean within ±15%, p99 at most 1.5×), with a 90% bootstrap interval of that median (rounds
# resampled with replacement): a goal is met or missed only when the whole interval is on one side
# of it, else (and always with fewer than 3 rounds) undecided. Two figures of ours:
# - `sub`: latency from submission (the one-shot JSON's submission_latency_seconds), fio's `lat`
#   measured the same way: this compares the engines;
# - `lat`: what the agent exports (latency_seconds): the same, except that an I/O the device held
#   back past its due time (every queue slot busy then; `held back` counts them) counts from its
#   due time. fio does not count that (coordinated omission), so on a device that stalls for
#   longer than the cap's interval `lat` exceeds fio's by design; it equals `sub` when nothing
#   was held back.
# A case whose IOPS falls short of its cap in either tool (the device is the limit) is flagged:
# compare latency only at caps both reach.
# The device's own view of each run, from the loop device's /sys/block/*/stat (the block layer's
# time per read, which no engine's waiting is part of): `dev` is its mean read time, `in flight`
# the mean number of reads it held (IOPS × `dev`, Little's law), and
# `over dev` what each tool's mean adds to its own run's `dev`: the engine's share of the mean.
set -euo pipefail

ROUNDS=${1:-6}
RUNTIME=${2:-5}
SIZE_MIB=${SIZE_MIB:-256}
ENGINE=${ENGINE:-io_uring}
cd "$(dirname "$0")/.."
source bench/common.sh

need_root "loop devices"
need fio "apt-get install fio"
need losetup
FIO=$(command -v fio)
if [[ -n "${OURS_BIN:-}" ]]; then OURS=$OURS_BIN; else build_ours; fi

case ${BACKING:-disk} in
  disk) make_workdir /var/tmp/probe_vs_fio_rate.XXXXXX ;;
  tmpfs) make_workdir /dev/shm/probe_vs_fio_rate.XXXXXX ;;
  *) echo "BACKING is disk or tmpfs" >&2; exit 1 ;;
esac
head -c $((SIZE_MIB << 20)) /dev/urandom > "$WORK/backing.img"
LOOP=$(losetup --find --show --direct-io=on "$WORK/backing.img")
echo "device: $LOOP (file on $(stat -f -c %T "$WORK"), direct I/O $(cat /sys/block/"${LOOP#/dev/}"/loop/dio), ${SIZE_MIB} MiB); engine $ENGINE; $ROUNDS rounds of ${RUNTIME}s; $("$FIO" --version); kernel $(uname -r); $(nproc) CPUs" >&2

RESULTS="$WORK/results.tsv"
: > "$RESULTS"
# name | iodepth | rate_iops
CASES=(
  "qd1-200 1 200"
  "qd1-500 1 500"
  "qd1-5000 1 5000"
  "qd8-5000 8 5000"
)

# Reads completed and the milliseconds they took (the sum) on the loop device.
dev_stat() { awk '{print $1, $4}' "/sys/block/${LOOP#/dev/}/stat"; }
# The device's mean read time (ns) since the snapshot $1 $2.
dev_view() {
  read -r ios ticks < <(dev_stat)
  awk -v a="$1" -v b="$2" -v n="$ios" -v t="$ticks" 'BEGIN { printf "%.0f\n", (n > a) ? (t - b) / (n - a) * 1e6 : 0 }'
}

run_ours() { # name qd rate round
  local before; before=$(dev_stat)
  "$OURS" probe --target "$LOOP" --engine "$ENGINE" --format json --runtime "${RUNTIME}s" \
    --fio "-rw=randread -bs=4k -iodepth=$2 -rate_iops=$3" > "$WORK/out"
  # shellcheck disable=SC2086
  python3 - "$WORK/out" "$1" "$4" "$(dev_view $before)" >>"$RESULTS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
l = r["latency_seconds"]
s = r["submission_latency_seconds"]
print("\t".join(map(str, [sys.argv[2], "ours", sys.argv[3], r["iops"], l["mean"] * 1e9, l["p99"] * 1e9,
                          s["mean"] * 1e9, s["p99"] * 1e9, r["held_back_ios"], sys.argv[4]])))
PY
}

run_fio() { # name qd rate round
  local before; before=$(dev_stat)
  # fio's psync engine runs one I/O at a time per job (it caps iodepth at 1): a depth of N is N
  # jobs, each at 1/N of the rate, reported as one group, as ours runs N psync threads.
  local depth=(--iodepth="$2" --rate_iops="$3")
  if [[ $ENGINE == psync && $2 -gt 1 ]]; then
    depth=(--iodepth=1 --numjobs="$2" --rate_iops="$(( $3 / $2 ))" --group_reporting)
  fi
  "$FIO" --name=bench --filename="$LOOP" --direct=1 --ioengine="$ENGINE" --rw=randread --bs=4k \
    "${depth[@]}" --time_based --runtime="$RUNTIME" --lat_percentiles=1 \
    --output-format=json > "$WORK/out"
  # shellcheck disable=SC2086
  python3 - "$WORK/out" "$1" "$4" "$(dev_view $before)" >>"$RESULTS" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
lat = j["lat_ns"]
p99 = lat["percentile"]["99.000000"]
print("\t".join(map(str, [sys.argv[2], "fio", sys.argv[3], j["iops"], lat["mean"], p99, lat["mean"], p99, 0, sys.argv[4]])))
PY
}

for round in $(seq 1 "$ROUNDS"); do
  for c in "${CASES[@]}"; do
    read -r name qd rate <<<"$c"
    [[ -n "${ONLY:-}" && $name != "$ONLY" ]] && continue
    if (( round % 2 )); then
      run_ours "$name" "$qd" "$rate" "$round"; run_fio "$name" "$qd" "$rate" "$round"
    else
      run_fio "$name" "$qd" "$rate" "$round"; run_ours "$name" "$qd" "$rate" "$round"
    fi
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
    case, who, rnd, *v = line.split("\t")
    v = tuple(map(float, v))  # iops, lat mean, lat p99, sub mean, sub p99, held back, dev mean
    rows[(case, who)].append(v)
    by_round[(case, rnd)][who] = v
med = lambda case, who, i: statistics.median(v[i] for v in rows[(case, who)])
cases = list(dict.fromkeys(c for c, _ in rows))
caps = {"qd1-200": 200, "qd1-500": 500, "qd1-5000": 5000, "qd8-5000": 5000}
print("| case | ours IOPS | fio IOPS | ours sub mean µs | ours lat mean µs | fio mean µs | ours sub p99 µs | ours lat p99 µs | fio p99 µs | held back |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in cases:
    o, f = "ours", "fio"
    print(f"| {c} | {med(c,o,0):,.0f} | {med(c,f,0):,.0f} "
          f"| {med(c,o,3)/1e3:.1f} | {med(c,o,1)/1e3:.1f} | {med(c,f,1)/1e3:.1f} "
          f"| {med(c,o,4)/1e3:.1f} | {med(c,o,2)/1e3:.1f} | {med(c,f,2)/1e3:.1f} | {med(c,o,5):,.0f} |")
print(f"\nmedians of {len(next(iter(rows.values())))} interleaved runs per tool and case; held back: I/Os of ours counted from their due time")
print("\nthe device's view (loop device stat): mean read time, reads in flight (IOPS x dev), each tool's mean over its run's dev:")
print("| case | ours dev µs | fio dev µs | ours in flight | fio in flight | ours sub over dev µs | fio over dev µs |")
print("|---|---:|---:|---:|---:|---:|---:|")
over = lambda c, w, i: statistics.median(v[i] - v[6] for v in rows[(c, w)])
for c in cases:
    o, f = "ours", "fio"
    flight = lambda w: statistics.median(v[0] * v[6] / 1e9 for v in rows[(c, w)])
    print(f"| {c} | {med(c,o,6)/1e3:.1f} | {med(c,f,6)/1e3:.1f} | {flight(o):.2f} | {flight(f):.2f} "
          f"| {over(c,o,3)/1e3:.1f} | {over(c,f,1)/1e3:.1f} |")
print("\nmedian of the per-round ratios ours / fio [90% bootstrap interval] (goals: mean 0.85..1.15, p99 <= 1.5):")
rng = random.Random(1)
def judged(ratios, lo, hi):
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    a, b = boot[100], boot[1899]
    inside = lambda x: (lo is None or x >= lo) and x <= hi
    v = "met" if inside(a) and inside(b) else "missed" if a > hi or (lo is not None and b < lo) else "undecided"
    if len(ratios) < 3:
        v = "undecided"  # an interval of one or two rounds says nothing
    return f"{statistics.median(ratios):.3f} [{a:.3f}, {b:.3f}] {v}"
for c in cases:
    pairs = [r for (cc, _), r in by_round.items() if cc == c and "ours" in r and "fio" in r]
    ratios = lambda i, j: [p["ours"][i] / p["fio"][j] for p in pairs]
    short = [w for w in ("ours", "fio") if med(c, w, 0) < 0.98 * caps.get(c, 0)]
    note = f"  (cap not reached by {', '.join(short)}: not comparable)" if short else ""
    print(f"  {c} ({len(pairs)} rounds){note}:")
    print(f"    sub mean {judged(ratios(3, 1), 0.85, 1.15)}, sub p99 {judged(ratios(4, 2), None, 1.5)}")
    print(f"    lat mean {judged(ratios(1, 1), 0.85, 1.15)}, lat p99 {judged(ratios(2, 2), None, 1.5)}")
PY
