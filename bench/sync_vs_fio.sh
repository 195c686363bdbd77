#!/usr/bin/env bash
# Durability probes against fio 3.33: the latency of fdatasync as our probe and fio measure it,
# side by side on the same filesystem (the root disk by default), engine for engine.
#
# Usage: bench/sync_vs_fio.sh [ROUNDS] [SECONDS]   (defaults: 5 rounds, 5 s per 4k run)
#        DIR=/mnt/x bench/sync_vs_fio.sh            (where the files go; default /var/tmp)
#        ETCD_SIZE=22m bench/sync_vs_fio.sh         (size of the etcd job; default etcd's 22m)
#        ONLY=etcd-wal bench/sync_vs_fio.sh         (only the cases whose name matches)
#        KEEP=runs.tsv bench/sync_vs_fio.sh         (also keep every run)
# Needs: fio, python3, cargo; no root (the files are created in DIR).
#
# Cases, each with our psync engine against fio's sync engine (etcd's job uses it; ours issues
# pwrite + fdatasync, fio write + fdatasync) and our io_uring engine against fio's (both issue
# IORING_OP_FSYNC with IORING_FSYNC_DATASYNC once the write has completed):
# - write-4k-qd1-fdatasync: 4k O_DIRECT sequential writes, fdatasync after each, QD1, for SECONDS,
#   over the same 64 MiB probe file (created and filled by our probe before the first round; fio
#   overwrites the same blocks).
# - etcd-wal: etcd's hardware check, `fio --rw=write --ioengine=sync --fdatasync=1 --size=22m
#   --bs=2300` (buffered), into a file fio creates afresh each run (it preallocates it with
#   fallocate), against our etcd-wal profile, which writes the same 22 MiB into space it
#   preallocates in its probe file each run (`--size 22m`: the run ends when it is full); and,
#   to tell the tools apart from the files, etcd's job run by fio into that same kind of space
#   of the same probe file (fio-probe).
# Each round runs every case and engine, ours and fio in turn (the order rotates by round).
# fio is checked to have issued one sync per write (its JSON's sync.lat_ns.N against
# write.total_ios; a time-based job may end between its last write and that write's sync), ours
# likewise (syncs against ios). The table shows medians over the rounds
# of the sync latency mean and p99 (fio: its sync section, which holds the fdatasync calls), of
# the write latency mean (fio: lat, submission to completion) and of writes per second, and the
# ratios ours / fio; under it, the median of the per-round ratios of sync mean and p99 against
# the goal of 0.8..1.2.
set -euo pipefail

ROUNDS=${1:-5}
RUNTIME=${2:-5}
DIR=${DIR:-/var/tmp}
ETCD_SIZE=${ETCD_SIZE:-22m}
cd "$(dirname "$0")/.."
source bench/common.sh

need fio "apt-get install fio"
need fallocate "util-linux"
FIO=$(command -v fio)
build_ours
make_workdir "$DIR/sync_vs_fio.XXXXXX"
FSTYPE=$(findmnt -no FSTYPE -T "$WORK")
echo "directory: $WORK ($FSTYPE, device $(df --output=source "$WORK" | tail -1)); $ROUNDS rounds; 4k runs of ${RUNTIME}s; etcd job ${ETCD_SIZE}; $("$FIO" --version); kernel $(uname -r); $(nproc) CPUs" >&2

FILE4K="$WORK/probe-4k.dat"
ETCDFILE="$WORK/probe-etcd.dat"
mkdir "$WORK/fio-etcd"
# Create and fill both probe files once (not measured).
"$OURS" probe --target "$FILE4K" --size 64m --allow-writes --profile write-4k-qd1-fdatasync \
  --runtime 200ms --format json >/dev/null
"$OURS" probe --target "$ETCDFILE" --size "$ETCD_SIZE" --allow-writes --profile etcd-wal \
  --runtime 200ms --format json >/dev/null

RESULTS="$WORK/results.tsv"
: >"$RESULTS"

# ours CASE ENGINE ROUND: runs our probe, appends a result line.
ours() {
  local case=$1 engine=$2 round=$3 args
  if [[ $case == etcd-wal ]]; then
    # Bounded by its fresh space (ETCD_SIZE), as fio's job by its size; the runtime is a backstop.
    args=(--target "$ETCDFILE" --size "$ETCD_SIZE" --runtime 600s --timeout 700s)
  else
    args=(--target "$FILE4K" --size 64m --runtime "${RUNTIME}s")
  fi
  "$OURS" probe "${args[@]}" --profile "$case" --engine "$engine" --allow-writes \
    --format json >"$WORK/out"
  python3 - "$WORK/out" "$case" "$engine" "$round" >>"$RESULTS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
if r["error"]:
    sys.exit(f"our run failed: {r['error']}")
s, w = r["sync_latency_seconds"], r["latency_seconds"]
if r["syncs"] != r["ios"] or r["ios"] == 0:
    sys.exit(f"ours: {r['syncs']} syncs for {r['ios']} writes")
print("\t".join(map(str, [sys.argv[2], sys.argv[3], "ours", sys.argv[4], r["ios"], r["iops"],
                          s["mean"] * 1e9, s["p99"] * 1e9, w["mean"] * 1e9])))
PY
}

# The etcd probe file's region in bytes, and the space etcd-wal preallocates after it: as many
# whole 2300-byte writes as the region holds.
REGION=$(python3 -c 'import sys; s=sys.argv[1].lower(); m={"k":1<<10,"m":1<<20,"g":1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))' "$ETCD_SIZE")
FRESH=$((REGION / 2300 * 2300))

# fio CASE ENGINE ROUND [WHO]: runs fio's job for the case, appends a result line. WHO=fio-probe
# (etcd-wal only) runs etcd's job into the probe file instead, into space preallocated after its
# region as our probe does (fallocate -o REGION -l FRESH, truncated back afterwards): the same
# job on the same file state, which tells the tools apart from the files.
fio_run() {
  local case=$1 engine=$2 round=$3 who=${4:-fio} args
  local fio_engine=$engine
  [[ $engine == psync ]] && fio_engine=sync
  if [[ $case == etcd-wal && $who == fio-probe ]]; then
    fallocate -o "$REGION" -l "$FRESH" "$ETCDFILE"
    args=(--rw=write --ioengine="$fio_engine" --fdatasync=1 --filename="$ETCDFILE"
      --offset="$REGION" --size="$FRESH" --bs=2300 --name=mytest --fallocate=none)
  elif [[ $case == etcd-wal ]]; then
    # etcd's job, as etcd documents it, in a directory of its own; fio lays out a fresh file.
    rm -f "$WORK"/fio-etcd/*
    args=(--rw=write --ioengine="$fio_engine" --fdatasync=1 --directory="$WORK/fio-etcd"
      --size="$ETCD_SIZE" --bs=2300 --name=mytest)
  else
    args=(--name=bench --filename="$FILE4K" --rw=write --bs=4k --direct=1 --fdatasync=1
      --ioengine="$fio_engine" --size=64m --time_based --runtime="$RUNTIME")
  fi
  "$FIO" "${args[@]}" --output-format=json >"$WORK/out"
  [[ $who == fio-probe ]] && truncate -s "$REGION" "$ETCDFILE"
  python3 - "$WORK/out" "$case" "$engine" "$round" "$who" >>"$RESULTS" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
w, s = j["write"], j["sync"]["lat_ns"]
# fio leaves sync.total_ios at 0; the number of syncs it timed is sync.lat_ns.N. A time-based
# job that ends between a write and its sync has one write more.
if not 0 <= w["total_ios"] - s["N"] <= 1 or s["N"] == 0:
    sys.exit(f"fio: {s['N']} syncs for {w['total_ios']} writes")
elapsed = j["job_runtime"] / 1e3  # ms, writes and syncs
print("\t".join(map(str, [sys.argv[2], sys.argv[3], sys.argv[5], sys.argv[4], w["total_ios"],
                          w["total_ios"] / elapsed, s["mean"], s["percentile"]["99.000000"],
                          w["lat_ns"]["mean"]])))
PY
}

CASES=(write-4k-qd1-fdatasync etcd-wal)
for round in $(seq 1 "$ROUNDS"); do
  for case in "${CASES[@]}"; do
    [[ -n "${ONLY:-}" && $case != "$ONLY" ]] && continue
    for engine in psync io_uring; do
      runners=(ours fio)
      [[ $case == etcd-wal ]] && runners+=(fio-probe)
      # The order rotates from round to round.
      shift_by=$(((round - 1) % ${#runners[@]}))
      runners=("${runners[@]:shift_by}" "${runners[@]:0:shift_by}")
      for who in "${runners[@]}"; do
        if [[ $who == ours ]]; then
          ours "$case" "$engine" "$round"
        else
          fio_run "$case" "$engine" "$round" "$who"
        fi
      done
      echo "round $round/$ROUNDS: $case $engine done" >&2
    done
  done
done

[[ -n "${KEEP:-}" ]] && cp "$RESULTS" "$KEEP"
python3 - "$RESULTS" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
rounds = defaultdict(dict)
for line in open(sys.argv[1]):
    case, engine, who, rnd, ios, wps, smean, sp99, wmean = line.split("\t")
    v = [float(x) for x in (wps, smean, sp99, wmean, ios)]
    runs[(case, engine, who)].append(v)
    rounds[(case, engine, rnd)][who] = v
med = lambda k, i: statistics.median(v[i] for v in runs[k])
print("| case | engine (ours / fio) | ours sync mean µs | fio sync mean µs | ratio | ours sync p99 µs | fio sync p99 µs | ratio | ours write mean µs | fio write mean µs | ours writes/s | fio writes/s | ratio |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
keys = list(dict.fromkeys((c, e) for c, e, _ in runs))
for c, e in keys:
    o, f = (c, e, "ours"), (c, e, "fio")
    fe = "sync" if e == "psync" else e
    print(f"| {c} | {e} / {fe} | {med(o,1)/1e3:.0f} | {med(f,1)/1e3:.0f} | {med(o,1)/med(f,1):.3f} "
          f"| {med(o,2)/1e3:.0f} | {med(f,2)/1e3:.0f} | {med(o,2)/med(f,2):.3f} "
          f"| {med(o,3)/1e3:.1f} | {med(f,3)/1e3:.1f} "
          f"| {med(o,0):,.0f} | {med(f,0):,.0f} | {med(o,0)/med(f,0):.3f} |")
n = len(next(iter(runs.values())))
print(f"\nmedians of {n} interleaved runs per tool, case and engine; every run issued one sync per write")
probe = [(c, e) for c, e in keys if (c, e, "fio-probe") in runs]
if probe:
    print("\netcd's job into the probe file's fresh space (fio-probe: the same file state as ours):")
    print("| engine (ours / fio) | fio-probe sync mean µs | ours / fio-probe | fio-probe sync p99 µs | ours / fio-probe | fio (fresh file) / fio-probe, mean |")
    print("|---|---:|---:|---:|---:|---:|")
    for c, e in probe:
        o, f, fp = (c, e, "ours"), (c, e, "fio"), (c, e, "fio-probe")
        fe = "sync" if e == "psync" else e
        print(f"| {e} / {fe} | {med(fp,1)/1e3:.0f} | {med(o,1)/med(fp,1):.3f} | {med(fp,2)/1e3:.0f} "
              f"| {med(o,2)/med(fp,2):.3f} | {med(f,1)/med(fp,1):.3f} |")
print("\nmedian of the per-round ratios ours / fio, and ours / fio-probe (goal 0.8..1.2 against fio):")
for c, e in keys:
    for other in ("fio", "fio-probe"):
        pairs = [r for (cc, ee, _), r in rounds.items() if (cc, ee) == (c, e) and "ours" in r and other in r]
        if not pairs:
            continue
        for i, what in ((1, "sync mean"), (2, "sync p99")):
            ratios = sorted(p["ours"][i] / p[other][i] for p in pairs)
            m = statistics.median(ratios)
            verdict = ("within" if 0.8 <= m <= 1.2 else "outside") if other == "fio" else ""
            print(f"  {c} {e} {what} / {other}: {m:.3f} (range {ratios[0]:.3f}..{ratios[-1]:.3f}, {len(pairs)} pairs) {verdict}")
PY
