#!/usr/bin/env python3
"""Ours against fio, interleaved pairs on one device, with per-point ratios and bootstrap intervals.

Driven by bench/qd_sweep.sh and bench/seed_jobs_vs_fio.sh (which make the device and build the
binary); usable on its own:

  bench/fio_pairs.py --device /dev/loopN --ours target/release/diskprobe_exporter \
      --point randread:4k:8 --point read:1M:64 [--engine io_uring|psync] [--pairs 3] [--more 4]
      [--runtime 2] [--keep runs.tsv]

Every pair runs ours (`probe --fio '-rw=RW -bs=BS -iodepth=QD'`, one-shot, JSON) and fio
(`--ioengine=ENGINE --direct=1 --time_based --lat_percentiles=1`) back to back, in an order
that alternates from pair to pair; the points are visited round-robin so that a slow spell of
the machine touches every point alike. Per point and pair: the ratio ours / fio of IOPS, of CPU
per I/O (the child's user + system time, all its threads, over the I/Os it completed) and of the
p50 and p99 latency (submission to completion for both). Printed per point: the median of the
per-pair ratios with a 90% bootstrap interval (pairs resampled with replacement, 2000 times,
fixed seed) and a verdict per goal: met or missed when the whole interval is on one side of the
goal, else undecided (always with fewer than 3 pairs). A point with an undecided goal is run again with --more pairs (once).

Goals: IOPS >= 1.0, CPU per I/O <= 0.9, p99 <= 1.1 from QD8 up (QD1-4: reported, no goal).
"""
import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile

GOALS = {  # what: (index, low, high, applies(qd))
    "IOPS": (0, 1.0, None, lambda qd: True),
    "CPU/IO": (1, None, 0.9, lambda qd: True),
    "p50": (2, None, None, lambda qd: True),
    "p99": (3, None, 1.1, lambda qd: qd >= 8),
}


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd):
    """Runs cmd; returns (stdout, CPU seconds of it)."""
    before = child_cpu()
    with tempfile.TemporaryFile() as out:
        rc = subprocess.run(cmd, stdout=out).returncode
        out.seek(0)
        text = out.read()
    if rc != 0:
        sys.exit(f"command failed ({rc}): {' '.join(cmd)}")
    return text, child_cpu() - before


def run_ours(a, rw, bs, qd):
    writes = ["--allow-writes"] if "write" in rw else []
    out, cpu = timed([a.ours, "probe", "--target", a.device, "--engine", a.engine, "--format",
                      "json", "--runtime", f"{a.runtime:g}s", *writes,
                      "--fio", f"-rw={rw} -bs={bs} -iodepth={qd}"])
    r = json.loads(out)[0]
    # Without a rate cap the two are the same (from submission); with one, fio counts from submission.
    lat = r["submission_latency_seconds"] or r["latency_seconds"]
    return (r["iops"], cpu / r["ios"] * 1e6, lat["p50"] * 1e6, lat["p99"] * 1e6)


def run_fio(a, rw, bs, qd):
    out, cpu = timed([a.fio, "--name=bench", f"--filename={a.device}", "--direct=1",
                      f"--ioengine={a.engine}", f"--rw={rw}", f"--bs={bs}", f"--iodepth={qd}",
                      "--time_based", f"--runtime={a.runtime:g}", "--lat_percentiles=1",
                      "--output-format=json"])
    j = json.loads(out)["jobs"][0]
    d = j["write"] if "write" in rw else j["read"]
    pct = d["lat_ns"]["percentile"]
    return (d["iops"], cpu / d["total_ios"] * 1e6, pct["50.000000"] / 1e3, pct["99.000000"] / 1e3)


def interval(ratios, rng):
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return boot[100], boot[1899]


def verdict(lo_goal, hi_goal, a, b):
    if lo_goal is None and hi_goal is None:
        return "-"
    inside = lambda x: (lo_goal is None or x >= lo_goal) and (hi_goal is None or x <= hi_goal)
    if inside(a) and inside(b):
        return "met"
    if (hi_goal is not None and a > hi_goal) or (lo_goal is not None and b < lo_goal):
        return "missed"
    return "undecided"


def judge(pairs, qd):
    rng = random.Random(1)
    out = {}
    for what, (i, lo, hi, applies) in GOALS.items():
        ratios = [o[i] / f[i] for o, f in pairs]
        a, b = interval(ratios, rng)
        # One or two pairs are no interval: never a verdict.
        v = ("undecided" if len(ratios) < 3 else verdict(lo, hi, a, b)) if applies(qd) and (lo, hi) != (None, None) else "-"
        out[what] = (statistics.median(ratios), a, b, v)
    return out


def run_pairs(a, points, n, results, keep, start):
    for k in range(n):
        for name, (rw, bs, qd) in points:
            first_ours = (start + k) % 2 == 0
            runs = [("ours", run_ours), ("fio", run_fio)]
            if not first_ours:
                runs.reverse()
            got = {}
            for who, f in runs:
                got[who] = f(a, rw, bs, qd)
                if keep:
                    print("\t".join(map(str, [name, who, start + k, *got[who]])), file=keep, flush=True)
            results.setdefault(name, []).append((got["ours"], got["fio"]))
        print(f"pair {start + k + 1}: {len(points)} points done", file=sys.stderr, flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", required=True)
    p.add_argument("--ours", required=True)
    p.add_argument("--fio", default="fio")
    p.add_argument("--engine", default="io_uring", choices=["io_uring", "psync"])
    p.add_argument("--point", action="append", required=True, help="RW:BS:QD")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--more", type=int, default=4, help="extra pairs for an undecided point")
    p.add_argument("--runtime", type=float, default=2)
    p.add_argument("--keep", help="also write every run to this TSV")
    a = p.parse_args()
    points = []
    for spec in a.point:
        rw, bs, qd = spec.split(":")
        points.append((f"{rw}-{bs.lower()}-qd{qd}", (rw, bs, int(qd))))
    keep = open(a.keep, "w") if a.keep else None
    results = {}
    run_pairs(a, points, a.pairs, results, keep, 0)
    undecided = [(n, s) for n, s in points
                 if any(v[3] == "undecided" for v in judge(results[n], s[2]).values())]
    if undecided and a.more > 0:
        print(f"undecided: {', '.join(n for n, _ in undecided)}; {a.more} more pairs each", file=sys.stderr)
        run_pairs(a, undecided, a.more, results, keep, a.pairs)

    print(f"ours / fio {a.engine}, median of per-pair ratios [90% bootstrap interval] verdict; "
          f"{a.runtime:g} s runs; goals: IOPS >= 1.0, CPU/IO <= 0.9, p99 <= 1.1 from QD8 up")
    print("| point | pairs | ours IOPS | fio IOPS | IOPS | CPU/IO | p50 | p99 |")
    print("|---|---:|---:|---:|---|---|---|---|")
    missed = 0
    for name, spec in points:
        pairs = results[name]
        j = judge(pairs, spec[2])
        cell = lambda w: f"{j[w][0]:.2f} [{j[w][1]:.2f}, {j[w][2]:.2f}] {j[w][3]}"
        missed += sum(v[3] == "missed" for v in j.values())
        oi = statistics.median(o[0] for o, _ in pairs)
        fi = statistics.median(f[0] for _, f in pairs)
        print(f"| {name} | {len(pairs)} | {oi:,.0f} | {fi:,.0f} | {cell('IOPS')} | {cell('CPU/IO')} | {cell('p50')} | {cell('p99')} |")
    print(f"\n{missed} goal(s) missed")


if __name__ == "__main__":
    main()
