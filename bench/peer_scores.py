#!/usr/bin/env python3
"""The distributions behind the peer rules' thresholds (docs/rules-design.md, "The boundary"):
for each seed's simulated week (deploy/prometheus/scenarios/fleet.py), each disk's ratio to its
cohort's median, computed as diskprobe.fleet.sample and diskprobe.fleet.score compute it (the
last p99 every 5 minutes over the median of its cohort's members at that moment, cohorts of 5 or
more; the median and 80th percentile of a disk's ratios over 12 hours, every 30 minutes, once it
has 3 hours of them). Disks that serve several times their peers' workload are left out of the
reference, as the rules leave them out.

The fast path (DiskprobeFarSlowerThanPeers): each disk's median ratio over the last 30 minutes,
every 5 minutes; for the healthy disks the highest it reached in the week, for the fail-slow disks
the highest they reached, which says which of them the fast path names too.

Printed: for the healthy disks, the highest 12-hour median ratio, 80th percentile and modified
z-scores in the cohort (0.6745 (x - median) / MAD, MAD at least 0.01) each disk reached at any
time of the week, as quantiles over all disks of all seeds, and separately for the disks the
scenarios make unusual (the 1.3x outlier, the 1.5x afternoon, the busy disk, the one slow run);
for each fail-slow disk, the lowest of each from one `for` (1 hour) before the deadline by which
it must be named to the end of the week. A ratio threshold between the healthy disks' highest
and the fail-slow disks' lowest names every fail-slow disk in time and no healthy one (the
z-score limit must stay below the fail-slow disks' lowest z-score).

    python3 bench/peer_scores.py [SEEDS...]      # default: seeds 1 to 21 (the tuning seeds)
"""

import math
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "deploy", "prometheus", "scenarios"))

import fleet as F  # noqa: E402
from common import quantile  # noqa: E402

EVAL = 5 * F.M
SCORE = 30 * F.M
WINDOW = 12 * F.H
HISTORY = 3 * F.H
FAST = 30 * F.M
MIN_SIZE = 5


def week(seed):
    """{target: {part: name or None, ratios: [(t, median, p80)]}} of one seed's fleet."""
    fleet = F.draw_fleet(seed)
    exp = F.Exporter(fleet, seed).run()
    disks = fleet.disks()
    parts = {p.disk.target: p for p in fleet.parts}
    # The p99 track of each disk (one profile), keyed by target: its series change with the
    # kernel name, the last present one counts.
    tracks = defaultdict(list)
    for (name, labels), track in exp.tracks.items():
        if name == "diskprobe_probe_latency_seconds" and ("stat", "p99") in labels:
            tracks[dict(labels)["target"]].append(track)

    def last(target, t):
        k = t // F.SCRAPE
        vals = [tr.value_at(k) for tr in tracks[target]]
        vals = [v for v in vals if v is not None and v > 0]
        return max(vals) if vals else None

    def busy(disk, t):
        return any(isinstance(f, F.Busy) and f.load(t) >= 3 for f in disk.faults)

    samples = defaultdict(list)  # target -> [(t, ratio)]
    for t in range(0, fleet.duration + 1, EVAL):
        by_cohort = defaultdict(list)
        now = {}
        for d in disks:
            v = last(d.target, t)
            if v is None:
                continue
            now[d.target] = (d, v)
            if not busy(d, t):
                by_cohort[tuple(sorted(d.model.key().items()))].append(v)
        for target, (d, v) in now.items():
            ref = by_cohort[tuple(sorted(d.model.key().items()))]
            if len(ref) >= MIN_SIZE:
                samples[target].append((t, v / quantile(0.5, ref)))
    # Every 30 minutes: each disk's median and 80th percentile over 12 hours, and their modified
    # z-scores among the disks of its cohort (busy ones left out of the reference).
    out = {d.target: dict(part=parts.get(d.target), ratios=[], fast=0.0) for d in disks}
    # Every 5 minutes: the median of each disk's ratios over the last 30 minutes (the samples of
    # a left-open range: one fewer than Prometheus 2 holds where one sits on the edge).
    for target, s in samples.items():
        first = 0
        for k, (t, _) in enumerate(s):
            while s[first][0] <= t - FAST:
                first += 1
            window = [r for (_, r) in s[first : k + 1]]
            out[target]["fast"] = max(out[target]["fast"], quantile(0.5, window))
    for t in range(0, fleet.duration + 1, SCORE):
        scored = defaultdict(list)
        for d in disks:
            s = samples[d.target]
            window = [r for (u, r) in s if t - WINDOW < u <= t]
            if not window or not any(t - HISTORY - F.H < u <= t - HISTORY for (u, _) in s):
                continue
            scored[tuple(sorted(d.model.key().items()))].append((d, quantile(0.5, window), quantile(0.8, window)))
        for members in scored.values():
            ref = [m for m in members if not busy(m[0], t)]
            if not ref:
                continue
            z = []
            for k in (1, 2):
                med = quantile(0.5, [m[k] for m in ref])
                mad = max(quantile(0.5, [abs(m[k] - med) for m in ref]), 0.01)
                z.append((med, mad))
            for d, m, q in members:
                zm = 0.6745 * (m - z[0][0]) / z[0][1]
                zq = 0.6745 * (q - z[1][0]) / z[1][1]
                out[d.target]["ratios"].append((t, m, q, zm, zq))
    return out


def main(argv):
    seeds = [int(a) for a in argv[1:]] or list(range(1, 22))
    healthy = defaultdict(list)  # median, p80, z of median, z of p80: the highest of each disk
    unusual = defaultdict(lambda: [0.0] * 4)
    failslow = defaultdict(lambda: [math.inf] * 4)
    fast_healthy, fast_unusual, fast_failslow = [], defaultdict(float), defaultdict(lambda: math.inf)
    # The longest time each fail-slow disk goes unnamed after its deadline, by z-score limit:
    # neither branch of DiskprobeSlowerThanPeers holds (ratio 1.6 and z above the limit; p80 2,
    # 1.6x its median and z above 2).
    limits = (3.5, 3.0, 2.5, 2.0)
    unnamed = defaultdict(float)
    for seed in seeds:
        for target, d in week(seed).items():
            p, rs = d["part"], d["ratios"]
            if p is None:
                fast_healthy.append(d["fast"])
            elif p.alert is None:
                fast_unusual[p.name] = max(fast_unusual[p.name], d["fast"])
            else:
                fast_failslow[p.name] = min(fast_failslow[p.name], d["fast"])
            if p is None or p.alert is None:
                # A ratio counts with its z-score, as the alert reads them together: the highest
                # ratio whose z-score is above the limit too, and the highest z-score alone.
                highest = [max((r[k] for r in rs), default=0.0) for k in (1, 2, 3, 4)]
                if p is None:
                    for k in range(4):
                        healthy[k].append(highest[k])
                else:
                    hi = unusual[p.name]
                    for k in range(4):
                        hi[k] = max(hi[k], highest[k])
            elif p.alert == "DiskprobeSlowerThanPeers":
                # From 1 hour before its deadline to the end, the lowest of each.
                after = [r for r in rs if r[0] >= p.by - F.H]
                for z in limits:
                    longest = run = 0
                    for r in after:
                        named = (r[1] >= 1.6 and r[3] > z) or (r[2] >= 2 and r[2] >= 1.6 * r[1] and r[4] > 2)
                        run = 0 if named else run + 1
                        longest = max(longest, run)
                    unnamed[(p.name, z)] = max(unnamed[(p.name, z)], longest * SCORE / F.H)
                if after:
                    lo = failslow[p.name]
                    for k in range(4):
                        lo[k] = min(lo[k], min(r[k + 1] for r in after))
    n = len(healthy[0])
    print(f"seeds: {len(seeds)} ({seeds[0]}..{seeds[-1]})")
    cols = "12h median ratio   12h p80 ratio   z(median)   z(p80)"
    print(f"healthy disks ({n}), the highest each reached in the week: quantiles over the disks")
    print(f"  {'':<16} {cols}")
    for q in (0.5, 0.9, 0.99, 1.0):
        v = [quantile(q, sorted(healthy[k])) for k in range(4)]
        print(f"  {'q' + str(q):<16} {v[0]:>16.3f} {v[1]:>15.3f} {v[2]:>11.2f} {v[3]:>8.2f}")
    print("healthy disks made unusual, the highest over the seeds:")
    for name, v in sorted(unusual.items()):
        print(f"  {name:<16} {v[0]:>16.3f} {v[1]:>15.3f} {v[2]:>11.2f} {v[3]:>8.2f}")
    print("fail-slow disks, the lowest from 1 hour before their deadline to the end, over the seeds:")
    for name, v in sorted(failslow.items()):
        print(f"  {name:<16} {v[0]:>16.3f} {v[1]:>15.3f} {v[2]:>11.2f} {v[3]:>8.2f}")
    print("30-minute median ratio (the fast path): healthy disks, the highest each reached, quantiles over the disks:")
    for q in (0.5, 0.9, 0.99, 1.0):
        print(f"  {'q' + str(q):<16} {quantile(q, sorted(fast_healthy)):>8.3f}")
    print("  healthy disks made unusual, the highest over the seeds:")
    for name, v in sorted(fast_unusual.items()):
        print(f"    {name:<16} {v:>8.3f}")
    print("  fail-slow disks, the highest each reached (the lowest over the seeds):")
    for name, v in sorted(fast_failslow.items()):
        print(f"    {name:<16} {v:>8.3f}")
    print("fail-slow disks, the longest time unnamed after 1 hour before their deadline, by z-score limit:")
    print(f"  {'':<16} " + "   ".join(f"z {z:<4}" for z in limits))
    for name in sorted({n for n, _ in unnamed}):
        print(f"  {name:<16} " + "   ".join(f"{unnamed[(name, z)]:>5.1f} h" for z in limits))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
