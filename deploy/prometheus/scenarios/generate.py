#!/usr/bin/env python3
"""Generates the scenario suites of deploy/prometheus/rules.yml for `promtool test rules`.

The series are not typed by hand: a small model of what diskprobe_exporter exports (a cycle of
runs every interval with jitter; per-run gauges; counts of the last runs; counters of runs, I/Os
and errors; classic latency buckets; diskstats; discovery; `up`) is driven by scenarios that say
what happens to a disk ("one slow run", "a sustained x4 regression on NVMe", "the agent
restarts"). Each one-target scenario states, for every alert, whether it fires and from when; the
suite checks every alert at every checkpoint. The fleet scenarios (fleet.py) put dozens of disks
side by side for a week; they are drawn from a seed. The rule-chaos suite (chaos.py) injects what
real fleets do to the series (two scrapes of one agent, a rollout with maxSurge, kernel names that
swap with and without staleness markers) and fails if any rule fails to evaluate.

    python3 deploy/prometheus/scenarios/generate.py OUT.json        # one-target scenarios
    python3 deploy/prometheus/scenarios/generate.py --fleet SEED OUT.json
    python3 deploy/prometheus/scenarios/generate.py --fleet exact OUT.json
    python3 deploy/prometheus/scenarios/generate.py --chaos SEED OUT.json   # rule chaos (chaos.py)
    python3 deploy/prometheus/scenarios/generate.py --table         # the table in docs/rules-design.md
    promtool test rules OUT.json

Each takes `--engine prometheus2` (the default: Debian 12's 2.42) or `--engine prometheus3`
(3.5 LTS): the expected values are computed for that engine's ranges (common.py, "The engine");
the alerts, their labels and firing times are the same for both.

OUT.json is YAML (JSON is a subset) and names rules.yml by absolute path. tests/it/prometheus_rules.rs
runs them all. Standard library only.

The model exports classic buckets only: promtool 2.42 does not accept native histograms in
`input_series` (it rejects the `{{schema:... buckets:[...]}}` notation). Of the rules only the
cloud latency recordings read a histogram (diskprobe_cloud_io_latency_seconds, classic or as NHCB),
which the model does not export; tests/it/prometheus_e2e.rs runs the rules and the dashboards'
queries on real Prometheus 2.42 and 3.5 servers, native histograms only among them, and
tests/it/cloud_stats.rs the cloud rules on classic buckets and NHCB.

promtool evaluates every rule group at the suite's evaluation interval, whatever the group's own
`interval` (the hourly baseline group included); the suites use 5 minutes, the shortest interval
of the rules, so firing times are on a 5-minute grid. The expected annotations are computed here
the way Prometheus 2.42 computes them, from the same samples and at the same evaluations.
"""

import bisect
import json
import math
import random
import sys
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

import fleet
from common import (
    GROUP_ORDER,
    JOB,
    RULES,
    encode,
    humanize,
    humanize1024,
    humanize_duration,
    humanize_timestamp,
    keep_firing_for,
    labels_text,
    prom_rate,
    quantile,
    range_points,
    runbook_tests,
    for_engine,
    set_engine,
    severity,
)

import chaos
import headroom

SCRAPE = 30  # seconds between scrapes
EVAL = 300  # seconds between rule evaluations in the suite
M = 60
H = 3600
DAY = 24 * H
ALERTS = [
    "DiskprobeLatencyRegression",
    "DiskprobeIOPSDrop",
    "DiskprobeThroughputDrop",
    "DiskprobeSyncLatencyHigh",
    "DiskprobeProbeFailing",
    "DiskprobeIOErrors",
    "DiskprobeTargetVanished",
    "DiskprobeIOHung",
    "DiskprobeProbeStale",
    "DiskprobeProbeAbsent",
    "DiskprobeExporterDown",
    "DiskprobeDiskSaturated",
    "DiskprobeSlowerThanPeers",
    "DiskprobeFarSlowerThanPeers",
    "DiskprobeCohortSlowdown",
    "DiskprobeDiskLost",
    "DiskprobeNearLimit",
    "DiskprobeThrottled",
]
RECENT_RUNS = 10  # diskprobe_probe_recent_runs counts the last 10 finished runs
RECENT_SYNC_RUNS = 3  # diskprobe_probe_recent_sync_latency_seconds: the least of the last 3


def round3(x):
    digits = 2 - math.floor(math.log10(x))
    return round(x, digits)


# Classic buckets, one per doubling from 10 us (the agent's coarse layout); +Inf is implied.
BUCKETS = [round3(1e-5 * 2**k) for k in range(23)]


# ---------------------------------------------------------------------------------------------
# What the agent is configured with.


@dataclass
class Profile:
    name: str
    rw: str
    block_size: int
    iodepth: int
    p99: float  # healthy exact p99 of a run, seconds
    iops: float  # healthy IOPS of a run
    rate_iops: int = 0
    sync_p99: float = 0.0  # healthy exact p99 of a run's syncs (fsync/fdatasync profiles), seconds


@dataclass
class Target:
    name: str
    device: str
    profiles: list
    interval: int = 300
    kind: str = "file"
    fstype: str = "ext4"
    path: str = ""
    start: int = 0  # when the target was added to the configuration
    rule: str = ""  # the [[discover]] rule that found it ("": a [[targets]] entry)
    model: str = ""  # of the disk under it (diskprobe_disk_info)
    serial: str = ""
    gone: int = None  # when its disk (block rule) or mount (mount rule) went away
    attached: int = 0  # when its disk appeared on this node (a volume that moved here)
    # When a reload's `[retired] disks` names its disk: a lost disk leaves /metrics, a configured
    # target forgets the device it held while it was gone.
    retired: int = None

    def retired_by(self, t):
        return self.retired is not None and self.retired <= t

    def __post_init__(self):
        if not self.path:
            self.path = f"/srv/{self.name}/probe.dat"


def etcd_wal(sync_p99):
    """etcd's WAL job: 2300-byte buffered writes, fdatasync after each (one sync per write)."""
    return Profile("etcd-wal", "write", 2300, 1, p99=40e-6, iops=1 / (sync_p99 / 2.5), sync_p99=sync_p99)


def nvme_qd1():
    return Profile("randread-4k-qd1", "randread", 4096, 1, p99=150e-6, iops=9000)


def hdd_qd1():
    return Profile("randread-4k-qd1", "randread", 4096, 1, p99=13e-3, iops=120)


def gentle():
    """A rate-capped latency profile: its IOPS is the cap, whatever the disk can do."""
    return Profile("gentle-4k-qd1", "randread", 4096, 1, p99=2e-3, iops=150, rate_iops=150)


def nvme_qd32():
    return Profile("randread-4k-qd32", "randread", 4096, 32, p99=900e-6, iops=40000)


def nvme_1m():
    return Profile("read-1m-qd16", "read", 1 << 20, 16, p99=12e-3, iops=1600)


@dataclass
class Agent:
    instance: str
    targets: list
    # One dict of extra labels per scrape of the agent: two for an agent scraped twice (a
    # ServiceMonitor adds `service`, a PodMonitor does not).
    copies: list = field(default_factory=lambda: [{}])
    down: list = field(default_factory=list)  # [(from, to)]: not answering scrapes, then restarted
    rules: dict = field(default_factory=dict)  # [[discover]] rule id -> kind (block, mount)
    diskstats_fails: int = None  # from then on the diskstats collector fails (no disk series)


# ---------------------------------------------------------------------------------------------
# What a run measures, and what scenarios do to it.


@dataclass
class Run:
    result: str = "success"  # success | error | timeout | skipped
    ran: bool = True  # the engine ran (per-run latency/IOPS gauges are set)
    p99: float = 0.0
    iops: float = 0.0
    io_errors: int = 0
    sync_p99: float = 0.0
    skip_reason: str = "in_flight"  # of a skipped run: diskprobe_probe_last_skip_timestamp_seconds
    gone: bool = False  # the target's device is gone (held): counted, but not a recent run


class Effect:
    """Changes the runs of one target (all targets when target is None) from `start` on."""

    def __init__(self, start=0, target=None, profile=None, end=None):
        self.start, self.target, self.profile, self.end = start, target, profile, end

    def applies(self, target, profile, t):
        return (
            (self.target is None or self.target == target.name)
            and (self.profile is None or self.profile == profile.name)
            and self.start <= t
            and (self.end is None or t < self.end)
        )


class Noise(Effect):
    def __init__(self, pct, **kw):
        super().__init__(**kw)
        self.pct = pct

    def apply(self, run, target, profile, rng, t):
        run.p99 *= rng.uniform(1 - self.pct, 1 + self.pct)
        run.sync_p99 *= rng.uniform(1 - self.pct, 1 + self.pct)
        if not profile.rate_iops:
            run.iops *= rng.uniform(1 - self.pct / 2, 1 + self.pct / 2)


class Slower(Effect):
    """Latency x factor. Uncapped profiles lose IOPS in proportion (QD1: 1/latency; deep
    queues: Little's law); a rate-capped profile keeps its cap."""

    def __init__(self, factor, **kw):
        super().__init__(**kw)
        self.factor = factor

    def apply(self, run, target, profile, rng, t):
        run.p99 *= self.factor
        run.sync_p99 *= self.factor
        if not profile.rate_iops:
            run.iops /= self.factor


class OneSlowRun(Effect):
    """The first run at or after `start`: 7% of its I/Os took 90 ms."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.done = set()

    def apply(self, run, target, profile, rng, t):
        key = (target.name, profile.name)
        if key not in self.done:
            self.done.add(key)
            run.p99 = 0.09
            if not profile.rate_iops:
                run.iops *= 0.1


class EveryNth(Effect):
    """An effect on every `every`-th run of each target and profile it applies to."""

    def __init__(self, every, **kw):
        super().__init__(**kw)
        self.every, self.runs = every, {}

    def due(self, target, profile):
        """Counts this run; whether it is an `every`-th one."""
        key = (target.name, profile.name)
        self.runs[key] = self.runs.get(key, 0) + 1
        return self.runs[key] % self.every == 0


class SlowSyncs(EveryNth):
    """Every `every`-th run's syncs have a p99 of `p99` (a disk whose flushes stall now and then)."""

    def __init__(self, every, p99, **kw):
        super().__init__(every, **kw)
        self.p99 = p99

    def apply(self, run, target, profile, rng, t):
        if self.due(target, profile) and profile.sync_p99:
            run.sync_p99 = self.p99
            run.iops = 1 / (self.p99 / 2.5)


class Failing(EveryNth):
    """Every `every`-th run fails before any I/O (open error): no per-run latency or IOPS."""

    def apply(self, run, target, profile, rng, t):
        if self.due(target, profile):
            run.result, run.ran = "error", False


class IOErrors(Effect):
    """Every run has `n` failed I/Os (result error, the run's figures are still exported)."""

    def __init__(self, n, **kw):
        super().__init__(**kw)
        self.n = n

    def apply(self, run, target, profile, rng, t):
        run.result, run.io_errors = "error", self.n


class Vanished(Effect):
    """The device fell off the bus: opens fail, and it is gone from /proc/diskstats (until `end`,
    when it is back). The agent keeps it as the target's device (its state directory keeps it
    across restarts) and leaves the failed runs out of the recent runs, until it is back or
    retired."""

    def apply(self, run, target, profile, rng, t):
        run.result, run.ran = "error", False
        run.gone = not target.retired_by(t)


class IOErrorsEvery(EveryNth):
    """Every `every`-th run has `n` failed I/Os (intermittent errors)."""

    def __init__(self, every, n, **kw):
        super().__init__(every, **kw)
        self.errors = n

    def apply(self, run, target, profile, rng, t):
        if self.due(target, profile):
            run.result, run.io_errors = "error", self.errors


class Hung(Effect):
    """The device hangs: the first run from `start` on times out with its I/O held by the kernel
    (`at`: when it was issued), and every later run is skipped while the I/O is held. With
    `stuck`, a hook that exports the held I/O as the agent does."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.at = None

    def apply(self, run, target, profile, rng, t):
        if self.at is None:
            self.at = t - 1  # the run started a second before it ended
            run.result, run.ran = "timeout", False
        else:
            run.result, run.ran, run.skip_reason = "skipped", False, "held_by_kernel"

    def stuck(self, sim, agent, base, state, t):
        for target in agent.targets:
            if self.target not in (None, target.name):
                continue
            for profile in target.profiles:
                p = dict(base, target=target.name, profile=profile.name, device=target.device)
                held = self.at is not None and self.at <= t
                sim.put("diskprobe_probe_stuck_ios", p, 1 if held else 0)
                sim.put("diskprobe_probe_stuck_io_age_seconds", p, t - self.at if held else 0)


class Skipped(Effect):
    """Runs are skipped for `reason` (in_flight: an open that hangs; busy: the workload needs the
    disk; budget; ...): no run finishes."""

    def __init__(self, reason="in_flight", **kw):
        super().__init__(**kw)
        self.reason = reason

    def apply(self, run, target, profile, rng, t):
        run.result, run.ran, run.skip_reason = "skipped", False, self.reason


@dataclass
class Queue:
    """Diskstats of one device: average queue size and utilisation from `start` on."""

    device: str
    size: float
    util: float
    start: int = 0


# ---------------------------------------------------------------------------------------------
# The exporter model: runs every interval, publishes gauges and counters, scraped every 30 s.


@dataclass
class ProfileState:
    runs: dict = field(default_factory=lambda: dict(success=0, error=0, timeout=0, skipped=0))
    ios: int = 0
    io_errors: int = 0
    busy: float = 0.0
    buckets: list = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    latency_sum: float = 0.0
    syncs: int = 0
    sync_buckets: list = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    sync_sum: float = 0.0
    last: dict = None
    skips: dict = field(default_factory=dict)  # reason -> when a run was last skipped for it
    # The last finished runs: (result, had I/O errors); the sync p99 of the last runs that synced.
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_RUNS))
    recent_sync: deque = field(default_factory=lambda: deque(maxlen=RECENT_SYNC_RUNS))


def rescan_after(t):
    """The first discovery rescan (every 30 s) at or after t."""
    return math.ceil(t / 30) * 30


class Simulation:
    def __init__(self, scenario):
        self.s = scenario
        self.series = {}  # (name, labels tuple) -> [value or None per scrape]
        self.n = scenario.duration // SCRAPE + 1

    def keys(self, name, labels):
        for extra in self.copies:
            full = dict(labels, **extra)
            yield (name, tuple(sorted((k, str(v)) for k, v in full.items() if v != "")))

    def put(self, name, labels, value):
        """What the agent exports from now on (until changed or removed)."""
        for key in self.keys(name, labels):
            self.current[key] = value

    def remove(self, name, labels):
        for key in self.keys(name, labels):
            self.current.pop(key, None)

    def scraped(self, i):
        for key, value in self.current.items():
            if key not in self.series:
                self.series[key] = [None] * self.n
            self.series[key][i] = value

    def values(self, name, **labels):
        """Samples of the series named `name` with exactly `labels`."""
        return self.series[(name, tuple(sorted((k, str(v)) for k, v in labels.items() if v != "")))]

    def device_at(self, ts, instance, target, extra):
        """The `device` of `target`'s diskprobe_target_info at ts (a scrape time), as the scrape
        with the labels `extra` has it; None when it has none then."""
        for (name, labels), values in self.series.items():
            l = dict(labels)
            mine = l.get("instance") == instance and l.get("target") == target and all(l.get(k) == str(v) for k, v in extra.items())
            if name == "diskprobe_target_info" and mine and values[ts // SCRAPE] is not None:
                return l.get("device", "")
        return None

    def at(self, ts, name, **labels):
        """The value an instant selector reads at ts (a scrape time): None when absent."""
        key = (name, tuple(sorted((k, str(v)) for k, v in labels.items() if v != "")))
        return self.series[key][ts // SCRAPE] if key in self.series else None

    def run(self):
        s = self.s
        rng = random.Random(s.seed)
        for agent in s.agents:
            self.run_agent(agent, rng)
        return self

    def run_agent(self, agent, rng):
        s = self.s
        state, next_start, was_down = {}, {}, False
        self.copies, self.current = agent.copies, {}
        emitted = set()
        base = dict(job=JOB, instance=agent.instance)
        device_io = {}

        def schedule(target, now):
            next_start[target.name] = max(now, target.start) + 3

        for target in agent.targets:
            schedule(target, 0)
        for i in range(self.n):
            t = i * SCRAPE
            down = any(a <= t < b for a, b in agent.down)
            if down:  # the scrape fails: up is 0 and every series of the agent goes stale
                self.current = {}
                self.put("up", base, 0)
                self.scraped(i)
                self.current, was_down = {}, True
                continue
            if was_down:  # restarted: counters from zero, no last run, first cycle within 3 s
                was_down, state, emitted = False, {}, set()
                for target in agent.targets:
                    schedule(target, t)
            self.put("up", base, 1)
            failing = agent.diskstats_fails is not None and agent.diskstats_fails <= t
            self.put("diskprobe_scrape_collector_success", dict(base, collector="diskstats"), 0 if failing else 1)
            vanished = {
                target.device
                for target in agent.targets
                for e in s.effects
                if isinstance(e, Vanished) and e.applies(target, target.profiles[0], t)
            } | {target.device for target in agent.targets if target.gone is not None and rescan_after(target.gone) <= t}
            devices = sorted({target.device for target in agent.targets if target.attached <= t} | {q.device for q in s.queues})
            for device in devices:
                d = dict(base, device=device)
                disk = next((x for x in agent.targets if x.device == device), None)
                info = dict(d, rotational="0", model=disk.model if disk else "", serial=disk.serial if disk else "")
                if device in vanished or failing:
                    for name in ("diskprobe_disk_io_time_weighted_seconds_total", "diskprobe_disk_io_time_seconds_total"):
                        self.remove(name, d)
                    self.remove("diskprobe_disk_info", info)
                    continue
                queue = [q for q in s.queues if q.device == device and q.start <= t]
                size, util = (queue[-1].size, queue[-1].util) if queue else (0.05, 0.02)
                weighted, busy = device_io.get(device, (0.0, 0.0))
                if i > 0:
                    weighted, busy = weighted + size * SCRAPE, busy + util * SCRAPE
                device_io[device] = (weighted, busy)
                self.put("diskprobe_disk_info", info, 1)
                self.put("diskprobe_disk_io_time_weighted_seconds_total", d, weighted)
                self.put("diskprobe_disk_io_time_seconds_total", d, busy)
                # A steady workload: 35 reads, 15 writes and 2 flushes per second.
                self.put("diskprobe_disk_reads_completed_total", d, 35 * t)
                self.put("diskprobe_disk_writes_completed_total", d, 15 * t)
                self.put("diskprobe_disk_flush_requests_total", d, 2 * t)
            for rule in agent.rules:
                found = [x for x in agent.targets if x.rule == rule and x.start <= t and (x.gone is None or rescan_after(x.gone) > t)]
                self.put("diskprobe_discovered_targets", dict(base, rule=rule), len(found))
            for target in agent.targets:
                if t < target.start:
                    continue
                if target.gone is not None and rescan_after(target.gone) <= t:
                    self.forget(base, target, agent, t)
                    continue
                # A reload that retires the disk relabels the target at once.
                changed = target.name not in emitted or target.retired == t
                emitted.add(target.name)
                while next_start[target.name] + len(target.profiles) <= t:
                    changed = True
                    start = next_start[target.name]
                    for k, profile in enumerate(target.profiles):
                        self.apply_run(state, target, profile, start + k + 1, rng)
                    jitter = rng.uniform(-0.1, 0.1)
                    next_start[target.name] = start + target.interval * (1 + jitter)
                if changed:
                    self.emit(base, target, state, t)
            for hook in s.hooks:
                hook(self, agent, base, state, t)
            self.scraped(i)

    def forget(self, base, target, agent, t):
        """A discovered target whose disk or mount went away: its series leave /metrics; a disk
        that a block-device rule probed stays as lost (the agent keeps it in its state directory,
        so across restarts too) until it is retired."""
        for key in [k for k in self.current if dict(k[1]).get("target") == target.name]:
            del self.current[key]
        if agent.rules.get(target.rule) == "block" and not target.retired_by(t):
            self.put(
                "diskprobe_discovered_target_lost_timestamp_seconds",
                dict(base, rule=target.rule, target=target.name, device=target.device, model=target.model, serial=target.serial),
                rescan_after(target.gone) - 30,
            )

    def apply_run(self, state, target, profile, end, rng):
        run = Run(p99=profile.p99, iops=profile.iops, sync_p99=profile.sync_p99)
        for e in self.s.effects:
            if e.applies(target, profile, end):
                e.apply(run, target, profile, rng, end)
        st = state.setdefault((target.name, profile.name), ProfileState())
        st.runs[run.result] += 1
        if run.result == "skipped":
            st.skips[run.skip_reason] = end
            return
        if not run.gone:
            st.recent.append((run.result, run.io_errors > 0))
        # Gauges keep four significant digits, so that the values promtool reads back are the
        # ones this model computes with.
        p99 = float(f"{run.p99:.4g}")
        iops = float(f"{run.iops:.4g}")
        sync_p99 = float(f"{run.sync_p99:.4g}")
        st.last = dict(result=run.result, timestamp=end, ran=run.ran, p99=p99, iops=iops, sync_p99=sync_p99)
        if not run.ran:
            return
        if profile.sync_p99:
            st.recent_sync.append(sync_p99)
        n = max(1, round(iops))  # 1 s runs
        st.ios += n
        st.io_errors += run.io_errors
        st.busy += 1.0
        # 90% of the I/Os near the median (p99 / 2.5), 9% near the p99, 1% above it.
        n90, n9 = round(0.9 * n), round(0.09 * n)
        for count, latency in ((n90, p99 / 2.5), (n9, p99 * 0.9), (n - n90 - n9, p99 * 1.2)):
            st.buckets[bisect.bisect_left(BUCKETS, latency)] += count
            st.latency_sum += count * latency
        if profile.sync_p99:  # one sync after each write, distributed as the writes are
            st.syncs += n
            for count, latency in ((n90, sync_p99 / 2.5), (n9, sync_p99 * 0.9), (n - n90 - n9, sync_p99 * 1.2)):
                st.sync_buckets[bisect.bisect_left(BUCKETS, latency)] += count
                st.sync_sum += count * latency

    def emit(self, base, target, state, now):
        t = dict(base, target=target.name)
        info = dict(t, path=target.path, device=target.device, kind=target.kind, fstype=target.fstype, rule=target.rule)
        gone = any(isinstance(e, Vanished) and e.applies(target, target.profiles[0], now) for e in self.s.effects)
        if gone and target.retired_by(now):
            # Retired while gone: no device held; what a stat of the missing node finds.
            info.update(device="", kind="file", fstype="devtmpfs")
        device = info["device"]
        mine = [k for k in self.current if dict(k[1]).get("target") == target.name]
        if any(k[0] == "diskprobe_target_info" and dict(k[1]).get("device", "") != device for k in mine):
            for key in mine:  # every series of the target is labelled with its device
                del self.current[key]
        self.put("diskprobe_target_info", info, 1)
        self.put("diskprobe_target_interval_seconds", t, target.interval)
        for profile in target.profiles:
            self.put(
                "diskprobe_profile_info",
                dict(
                    t,
                    profile=profile.name,
                    rw=profile.rw,
                    block_size=profile.block_size,
                    iodepth=profile.iodepth,
                    rate_iops=profile.rate_iops,
                ),
                1,
            )
            st = state.setdefault((target.name, profile.name), ProfileState())
            p = dict(t, profile=profile.name, device=device)
            for result, count in st.runs.items():
                self.put("diskprobe_probe_runs_total", dict(p, result=result), count)
            for result in ("success", "error", "timeout"):
                self.put("diskprobe_probe_recent_runs", dict(p, result=result), sum(1 for r, _ in st.recent if r == result))
            self.put("diskprobe_probe_recent_io_error_runs", p, sum(1 for _, e in st.recent if e))
            for reason, at in st.skips.items():
                self.put("diskprobe_probe_last_skip_timestamp_seconds", dict(p, reason=reason), at)
            if len(st.recent_sync) == RECENT_SYNC_RUNS:
                self.put("diskprobe_probe_recent_sync_latency_seconds", dict(p, stat="p99"), min(st.recent_sync))
            self.put("diskprobe_ios_total", p, st.ios)
            self.put("diskprobe_io_errors_total", p, st.io_errors)
            self.put("diskprobe_probe_busy_seconds_total", p, st.busy)
            cumulative = 0
            for bound, count in zip(BUCKETS + ["+Inf"], st.buckets):
                cumulative += count
                self.put("diskprobe_io_latency_seconds_bucket", dict(p, le=bound), cumulative)
            self.put("diskprobe_io_latency_seconds_count", p, cumulative)
            self.put("diskprobe_io_latency_seconds_sum", p, round(st.latency_sum, 9))
            if profile.sync_p99:
                self.put("diskprobe_syncs_total", p, st.syncs)
                cumulative = 0
                for bound, count in zip(BUCKETS + ["+Inf"], st.sync_buckets):
                    cumulative += count
                    self.put("diskprobe_sync_latency_seconds_bucket", dict(p, le=bound), cumulative)
                self.put("diskprobe_sync_latency_seconds_count", p, cumulative)
                self.put("diskprobe_sync_latency_seconds_sum", p, round(st.sync_sum, 9))
            last = st.last
            if last is None:
                continue
            self.put("diskprobe_probe_success", p, int(last["result"] == "success"))
            self.put("diskprobe_probe_last_run_timestamp_seconds", p, last["timestamp"])
            per_run = [
                ("diskprobe_probe_iops", p),
                ("diskprobe_probe_throughput_bytes_per_second", p),
                ("diskprobe_probe_latency_seconds", dict(p, stat="p50")),
                ("diskprobe_probe_latency_seconds", dict(p, stat="p99")),
            ]
            if profile.sync_p99:
                per_run += [
                    ("diskprobe_probe_sync_latency_seconds", dict(p, stat="p50")),
                    ("diskprobe_probe_sync_latency_seconds", dict(p, stat="p99")),
                ]
            if not last["ran"]:
                for name, labels in per_run:
                    self.remove(name, labels)
            else:
                self.put("diskprobe_probe_iops", p, last["iops"])
                self.put(
                    "diskprobe_probe_throughput_bytes_per_second",
                    p,
                    last["iops"] * profile.block_size,
                )
                self.put("diskprobe_probe_latency_seconds", dict(p, stat="p50"), round(last["p99"] / 2.5, 9))
                self.put("diskprobe_probe_latency_seconds", dict(p, stat="p99"), last["p99"])
                if profile.sync_p99:
                    sync_p50 = round(last["sync_p99"] / 2.5, 9)
                    self.put("diskprobe_probe_sync_latency_seconds", dict(p, stat="p50"), sync_p50)
                    self.put("diskprobe_probe_sync_latency_seconds", dict(p, stat="p99"), last["sync_p99"])

    def input_series(self):
        out = []
        for (name, labels), values in sorted(self.series.items()):
            out.append(dict(series=name + labels_text(dict(labels)), values=encode(values)))
        return out


# ---------------------------------------------------------------------------------------------
# The recording rules of a target without a cohort, as promtool evaluates them (every group at
# every evaluation of the suite), for the values in expected annotations.


class Recordings:
    """diskprobe:probe_<metric>:{last,median_30m,median_1h,median_1d,baseline_7d} of one target
    and profile (one scrape of it), at evaluation times."""

    def __init__(self, sim, metric, labels, best, interval):
        self.sim, self.labels, self.best, self.interval = sim, labels, best, interval
        self.name, self.extra = {
            "latency": ("diskprobe_probe_latency_seconds", dict(stat="p99")),
            "iops": ("diskprobe_probe_iops", {}),
            "throughput": ("diskprobe_probe_throughput_bytes_per_second", {}),
        }[metric]
        self.cached = lru_cache(maxsize=None)(self.compute)

    def get(self, what, t):
        return self.cached(what, t) if t >= 0 else None

    def values(self, what, lo, hi):
        out = []
        for s in range_points(lo, hi, EVAL):
            v = self.get(what, s)
            if v is not None:
                out.append(v)
        return out

    def latest(self, what, t, window):
        """last_over_time(what[window]) at t."""
        for s in reversed(range_points(t - window, t, EVAL)):
            v = self.get(what, s)
            if v is not None:
                return v
        return None

    def compute(self, what, t):
        if what == "last":
            v = self.sim.at(t, self.name, **self.labels, **self.extra)
            return v if v is not None and v > 0 else None
        if what == "median_30m" and self.interval > 360 or what == "median_3h" and not 360 < self.interval <= 3600:
            return None
        if what in ("median_30m", "median_3h", "median_1h"):
            vals = self.values("last", t - {"median_30m": 30 * M, "median_3h": 3 * H, "median_1h": H}[what], t)
            return quantile(0.5, vals) if vals else None
        if what == "median_1d":
            vals = self.values("median_1h", t - DAY, t)
            if not vals or not self.values("median_1h", t - 21 * H, t - 20 * H):
                return None
            return quantile(0.5, vals)
        if what == "baseline_7d":
            midnights = range_points(t - 7 * DAY, t, DAY)  # the subquery's steps, [7d:1d]
            days = [v for v in (self.latest("median_1d", m, H) for m in midnights) if v is not None]
            return (min if self.best == "min" else max)(days) if days else None
        raise ValueError(what)


# ---------------------------------------------------------------------------------------------
# Expectations.


def cohort_size(sim, target, profile, ts):
    """How the regression alerts' annotations name the target's cohort: a target whose disk has
    a model has a cohort, of the targets on disks of that model with a last run of the profile."""
    if not target.model:
        return "it has no cohort of 5 to compare with"
    n = sum(
        1
        for a in sim.s.agents
        for t in a.targets
        if t.model == target.model and any(p.name == profile.name for p in t.profiles) and t.start <= ts
    )
    return f"its cohort has fewer than 5 members to compare with ({n} with a last run)"


@dataclass
class Fires:
    """`alert` fires for the series with `labels`: silent before `not_before`, firing from `by`
    until `until` (the end when None); in between it may be pending."""

    alert: str
    agent: Agent
    target: Target = None
    profile: Profile = None
    not_before: int = 0
    by: int = 0
    until: int = None
    device: str = None
    extra: dict = field(default_factory=dict)  # the labels of one scrape of an agent scraped twice

    def labels(self):
        a = self.agent
        base = dict(job=JOB, instance=a.instance, **self.extra)
        if self.alert == "DiskprobeExporterDown":
            return base
        if self.alert == "DiskprobeDiskSaturated":
            return dict(base, device=self.device)
        t = self.target
        if self.alert == "DiskprobeIOHung":
            return dict(base, target=t.name, profile=self.profile.name, device=t.device)
        if self.alert in ("DiskprobeTargetVanished", "DiskprobeProbeAbsent"):
            return dict(base, target=t.name, path=t.path, device=t.device, kind=t.kind, fstype=t.fstype, rule=t.rule)
        if self.alert == "DiskprobeDiskLost":
            return dict(base, rule=t.rule, target=t.name, device=t.device, model=t.model, serial=t.serial)
        return dict(base, target=t.name, profile=self.profile.name)

    def expected(self, sim, ts):
        labels = {k: str(v) for k, v in self.labels().items() if v != ""}
        labels["severity"] = severity(self.alert)
        inst, a = labels["instance"], self.alert
        t, p = self.target, self.profile
        device = sim.device_at(ts, inst, t.name, self.extra) if t else None
        probe = dict(job=JOB, instance=inst, target=t.name, profile=p.name, device=t.device if device is None else device, **self.extra) if p else None
        if a in ("DiskprobeLatencyRegression", "DiskprobeIOPSDrop", "DiskprobeThroughputDrop"):
            metric = {"DiskprobeLatencyRegression": "latency", "DiskprobeIOPSDrop": "iops", "DiskprobeThroughputDrop": "throughput"}[a]
            rec = Recordings(sim, metric, probe, "min" if metric == "latency" else "max", t.interval)
            current, over = rec.latest("median_30m", ts, 10 * M), "the last 30 minutes"
            if current is None:
                current, over = rec.latest("median_3h", ts, 10 * M), "the last 3 hours"
            day = rec.latest("median_1d", ts, 2 * H)
            base = rec.latest("baseline_7d", ts, 2 * H)
            fast, slow = current / base, (day / base if day is not None else None)
            if metric == "latency":
                value = fast if fast > 2.5 and current - base > 0.0001 else slow
                ann = dict(
                    summary=f"Disk latency regression on {inst} {t.name}",
                    description=(
                        f"The median p99 latency of profile {p.name} is {humanize_duration(current)} over {over} and "
                        f"{humanize_duration(day) if day is not None else 'unknown'} over the last day, {value:.2f}x its baseline (more than 2.5 and 100 us above it, or 2 over the day, fire) of "
                        f"{humanize_duration(base)} (its best daily median of the last 7 days); {cohort_size(sim, t, p, ts)}."
                    ),
                )
            else:
                value = fast if fast < 0.5 else slow
                show = humanize if metric == "iops" else (lambda v: humanize1024(v) + "B/s")
                what = "IOPS" if metric == "iops" else "throughput"
                ann = dict(
                    summary=f"Disk {what} dropped on {inst} {t.name}",
                    description=(
                        f"The median {what} of profile {p.name} is {show(current)} over {over}, "
                        f"{value:.2f}x its baseline (under 0.5 fires) of {show(base)} (its best daily median of the last 7 days); {cohort_size(sim, t, p, ts)}."
                    ),
                )
        elif a == "DiskprobeSyncLatencyHigh":
            v = sim.at(ts, "diskprobe_probe_recent_sync_latency_seconds", stat="p99", **probe)
            ann = dict(
                summary=f"Slow syncs on {inst} {t.name}",
                description=f"The p99 sync latency of profile {p.name} has been above 10 ms in each of its last 3 runs (at least {humanize_duration(v)}); etcd and other write-ahead logs wait for it on every commit.",
            )
        elif a == "DiskprobeProbeFailing":
            failed = sum(sim.at(ts, "diskprobe_probe_recent_runs", result=r, **probe) for r in ("error", "timeout"))
            ann = dict(
                summary=f"Disk probe failing on {inst} {t.name}",
                description=f"{failed} of the last 10 runs of profile {p.name} on {t.name} failed or timed out (3 or more fire); the agent's log says why.",
            )
        elif a == "DiskprobeIOErrors":
            # While it keeps firing (keep_firing_for) with fewer errors than it needs, the alert
            # keeps the value of its last evaluation that had them.
            k = ts
            while sim.at(k, "diskprobe_probe_recent_io_error_runs", **probe) < 2:
                k -= EVAL
            v = sim.at(k, "diskprobe_probe_recent_io_error_runs", **probe)
            disk = f" on {t.device} ({'serial ' + t.serial if t.serial else 'no serial'})"
            ann = dict(
                summary=f"Disk I/O errors on {inst} {t.name}",
                description=f"Probe I/Os of profile {p.name} on {t.name}{disk} failed in {v} of its last 10 runs (2 or more page; it keeps firing for 1h after).",
            )
        elif a == "DiskprobeTargetVanished":
            ann = dict(
                summary=f"Disk under probe target vanished on {inst} {t.name} ({t.device})",
                description=f"{t.device}, the device under target {t.name} ({t.path}), has been missing from /proc/diskstats for 5 minutes or more while the agent's diskstats collector works.",
            )
        elif a == "DiskprobeIOHung":
            v = sim.at(ts, "diskprobe_probe_stuck_io_age_seconds", **probe)
            ann = dict(
                summary=f"Disk I/O hung on {inst} {t.name} ({t.device})",
                description=f"{t.device}, under target {t.name}, has held an I/O of a probe run of profile {p.name} for {humanize_duration(v)} (300 s or more page); no probe runs on it until the kernel completes it.",
            )
        elif a == "DiskprobeProbeStale":
            last = sim.at(ts, "diskprobe_probe_last_run_timestamp_seconds", **probe)
            ann = dict(
                summary=f"Disk probe stale on {inst} {t.name}",
                description=f"Profile {p.name} on {t.name} has not finished a run for {(ts - last) / t.interval:.1f} intervals (more than 3.5 fire).",
            )
        elif a == "DiskprobeProbeAbsent":
            ann = dict(
                summary=f"Disk probe never ran on {inst} {t.name}",
                description=f"Target {t.name} ({t.path}) is configured but no run has finished in 30 minutes.",
            )
        elif a == "DiskprobeExporterDown":
            ann = dict(
                summary=f"diskprobe_exporter down on {inst}",
                description=f"Prometheus has not scraped diskprobe_exporter on {inst} for 5 minutes or more (up 0).",
            )
        elif a == "DiskprobeDiskSaturated":
            w = sim.values("diskprobe_disk_io_time_weighted_seconds_total", job=JOB, instance=inst, device=self.device)
            queue = prom_rate([(s, w[s // SCRAPE]) for s in range_points(ts - 5 * M, ts, SCRAPE)], ts - 5 * M, ts)
            ann = dict(
                summary=f"Disk {self.device} saturated on {inst}",
                description=f"The I/O queue of {self.device} has averaged {queue:.1f} requests for 30 minutes (more than 10 fire).",
            )
        elif a == "DiskprobeDiskLost":
            # Held through an agent restart (keep_firing_for): the value of its last evaluation.
            k, v = ts, None
            while v is None:
                v = sim.at(k, "diskprobe_discovered_target_lost_timestamp_seconds", **{n: x for n, x in labels.items() if n != "severity"})
                k -= EVAL
            ann = dict(
                summary=f"Disk lost on {inst}: {t.name}",
                description=f"The disk probed as target {t.name} by discovery rule {t.rule} (model {t.model}, serial {t.serial}, last seen as {t.device}) has been gone since {humanize_timestamp(v)}, and no node of the cluster has had a disk of that identity for 10m.",
            )
        else:
            raise ValueError(a)
        return dict(exp_labels=labels, exp_annotations=ann)


@dataclass
class Scenario:
    name: str
    says: str
    agents: list
    duration: int
    effects: list = field(default_factory=list)
    queues: list = field(default_factory=list)
    fires: list = field(default_factory=list)
    focus: int = 0  # checkpoints every 5 minutes from here on (hourly before)
    onset: int = 0  # when what the scenario is about happens (for the table)
    seed: int = 1
    promql: list = field(default_factory=list)
    # What else the agent exports: hook(sim, agent, base labels, probe state, t), at every scrape.
    hooks: list = field(default_factory=list)

    def checkpoints(self):
        hourly = list(range(H, self.focus, H))
        fine = list(range(self.focus, self.duration + 1, 5 * M))
        return sorted(set(hourly + fine))

    def alert_tests(self, sim):
        tests = []
        for ts in self.checkpoints():
            for alert in ALERTS:
                mine = [f for f in self.fires if f.alert == alert]
                if any(f.not_before <= ts < f.by for f in mine):
                    continue  # may be pending or firing: not checked here
                firing = [
                    f.expected(sim, ts)
                    for f in mine
                    if f.by <= ts and (f.until is None or ts < f.until)
                ]
                tests.append(dict(eval_time=f"{ts // M}m", alertname=alert, exp_alerts=firing))
        return tests

    def runbook_tests(self):
        """Each runbook query of each alert that fires returns data when it has fired."""
        out, seen = [], set()
        for f in self.fires:
            if (f.alert, f.by) in seen:
                continue
            seen.add((f.alert, f.by))
            out += runbook_tests(f.alert, {k: str(v) for k, v in f.labels().items()}, f.by)
        return out

    def test_group(self):
        sim = Simulation(self).run()
        group = dict(
            name=self.name,
            interval=f"{SCRAPE}s",
            input_series=sim.input_series(),
            alert_rule_test=self.alert_tests(sim),
        )
        # An entry may be a function of the simulation: a value computed from the samples.
        promql = [p(sim) if callable(p) else p for p in self.promql] + self.runbook_tests()
        if promql:
            group["promql_expr_test"] = promql
        return group

    def row(self):
        def rel(x):
            d = x - self.onset
            return f"+{d // H} h" if d >= 2 * H and d % H == 0 else f"+{d // M} min"

        def name(f):
            return f.target.name if f.target else None

        def when(f, again):
            copies = len({tuple(sorted(g.extra.items())) for g in self.fires if g.alert == f.alert})
            targets = len({name(g) for g in self.fires if g.alert == f.alert})
            text = (
                f"{f.alert}{' (once per scrape)' if copies > 1 else ''}{f' ({name(f)})' if targets > 1 else ''}: "
                f"silent up to {rel(max(c for c in self.checkpoints() if c < f.not_before))}, "
                f"firing from {rel(f.by)}" + (f" until {rel(f.until)}" if f.until else "")
            )
            return text + "".join(f", and from {rel(g.by)}" + (f" until {rel(g.until)}" if g.until else "") for g in again)

        seen, fires = set(), []
        for f in self.fires:
            if (f.alert, name(f)) not in seen:
                seen.add((f.alert, name(f)))
                again = [g for g in self.fires if g.alert == f.alert and g.extra == f.extra and name(g) == name(f) and g is not f]
                fires.append(when(f, again))
        onset = f"{self.onset / H:g} h" if self.onset >= H else f"{self.onset // M} min"
        return f"| `{self.name}` | {self.says} | {onset} | {'; '.join(fires) or 'none'} |"


# ---------------------------------------------------------------------------------------------
# The scenarios. Times are seconds since the start of the series.

ONSET = 26 * H  # after a day of history, when a baseline exists
GONE_STOPS_WITHIN = 10 * M  # a disk back or retired stops paging within this (issue 53)


def ends(alert, change):
    """When `alert`, firing, stops once its condition clears at `change` (a disk back, a disk
    retired): at the first evaluation that reads the first scrape at or after `change`, its
    expression returns nothing, and it keeps firing for its `keep_firing_for` (rules.yml) from
    there. Fails unless that is within GONE_STOPS_WITHIN of `change`."""
    seen = -(-change // SCRAPE) * SCRAPE
    cleared = -(-seen // EVAL) * EVAL
    end = cleared + -(-keep_firing_for(alert) // EVAL) * EVAL
    if end - change > GONE_STOPS_WITHIN:
        raise ValueError(f"{alert} would fire {(end - change) / M:g} minutes after {change}s, more than {GONE_STOPS_WITHIN // M}")
    return end


def nvme(instance="node-1:9957", **kw):
    return Agent(instance, [Target("data", "nvme0n1", [nvme_qd1()], **kw)])


def hdd(instance="node-2:9957", **kw):
    return Agent(instance, [Target("archive", "sda", [hdd_qd1()], kind="block_device", fstype="", **kw)])


def scenarios():
    out = []
    a = nvme()
    b = hdd()
    out.append(
        Scenario(
            "healthy-nvme-and-hdd",
            "NVMe (p99 150 us) and HDD (p99 13 ms) with run-to-run noise of +-20% for 28 h",
            [a, b],
            28 * H,
            effects=[Noise(0.2)],
            focus=ONSET,
            onset=ONSET,
            promql=[
                # The dashboards' "native or classic" p99 query works on classic-only data.
                dict(
                    expr='count(histogram_quantile(0.95, sum by (target, profile) (rate(diskprobe_io_latency_seconds{target="data"}[10m]))) '
                    'or histogram_quantile(0.95, sum by (target, profile, le) (rate(diskprobe_io_latency_seconds_bucket{target="data"}[10m]))) > 0.00008 < 0.00016)',
                    eval_time="27h",
                    exp_samples=[dict(labels="{}", value=1)],
                )
            ],
        )
    )
    a = nvme()
    b = hdd()
    out.append(
        Scenario(
            "noise-40",
            "run-to-run noise of +-40% on NVMe and HDD latency and IOPS",
            [a, b],
            28 * H,
            effects=[Noise(0.4)],
            focus=ONSET,
            onset=ONSET,
            seed=2,
        )
    )
    a = nvme()
    b = hdd()
    out.append(
        Scenario(
            "one-slow-run",
            "one run in which 7% of I/Os took 90 ms (p99 90 ms), at 26 h, on NVMe and HDD",
            [a, b],
            28 * H,
            effects=[Noise(0.2), OneSlowRun(start=ONSET)],
            focus=ONSET,
            onset=ONSET,
            seed=3,
        )
    )
    a = nvme()
    out.append(
        Scenario(
            "nvme-x4",
            "NVMe p99 150 us -> 600 us (x4) from 26 h on, with +-40% noise throughout; no peers",
            [a],
            28 * H,
            effects=[Noise(0.4), Slower(4, start=ONSET)],
            fires=[Fires("DiskprobeLatencyRegression", a, a.targets[0], a.targets[0].profiles[0], not_before=ONSET + 25 * M, by=ONSET + 40 * M)],
            focus=ONSET,
            onset=ONSET,
            seed=4,
        )
    )
    a = nvme(interval=3600)
    out.append(
        Scenario(
            "hourly-x4",
            "NVMe probed hourly, p99 150 us -> 600 us (x4) from 26 h on, with +-20% noise throughout; no peers",
            [a],
            30 * H,
            effects=[Noise(0.2), Slower(4, start=ONSET)],
            # Slow runs at 26.5, 27.5 and 28.6 h: the median of the last 3 hours is slow once
            # half of them are (28 h), and the alert fires before the third slow run.
            fires=[Fires("DiskprobeLatencyRegression", a, a.targets[0], a.targets[0].profiles[0], not_before=ONSET + 90 * M, by=ONSET + 2 * H + 30 * M)],
            focus=ONSET,
            onset=ONSET,
            seed=14,
        )
    )
    b = hdd()
    out.append(
        Scenario(
            "hdd-x4",
            "HDD p99 13 ms -> 54 ms from 26 h on, with +-40% noise throughout; no peers",
            [b],
            28 * H,
            effects=[Noise(0.4), Slower(54 / 13, start=ONSET)],
            fires=[Fires("DiskprobeLatencyRegression", b, b.targets[0], b.targets[0].profiles[0], not_before=ONSET + 25 * M, by=ONSET + 40 * M)],
            focus=ONSET,
            onset=ONSET,
            seed=5,
        )
    )
    a = Agent(
        "node-1:9957",
        [
            Target("data", "nvme0n1", [nvme_qd1()]),
            Target("fresh", "nvme1n1", [nvme_qd1()], start=24 * H),
        ],
    )
    out.append(
        Scenario(
            "new-target",
            "a target added at 24 h (no baseline yet) whose p99 goes x10 at 26 h",
            [a],
            28 * H,
            effects=[Noise(0.2), Slower(10, start=ONSET, target="fresh")],
            focus=ONSET,
            onset=ONSET,
            seed=6,
        )
    )
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1(), nvme_qd32()])],
        down=[(ONSET, ONSET + 2 * M)],
    )
    out.append(
        Scenario(
            "agent-restart",
            "the agent is down for 2 min at 26 h and restarts: counters from zero, no last run until its first cycle",
            [a],
            28 * H,
            effects=[Noise(0.2)],
            focus=ONSET - H,
            onset=ONSET,
            seed=7,
        )
    )
    a = Agent("node-1:9957", [Target("cloud", "sdb", [gentle()], kind="block_device", fstype="")])
    t = a.targets[0]
    out.append(
        Scenario(
            "rate-capped",
            "a rate-capped 4k QD1 profile (150 IOPS cap) on a cloud disk: p99 2 ms -> 8 ms at 26 h; its IOPS stays at the cap",
            [a],
            28 * H,
            effects=[Noise(0.3), Slower(4, start=ONSET)],
            fires=[Fires("DiskprobeLatencyRegression", a, t, t.profiles[0], not_before=ONSET + 25 * M, by=ONSET + 40 * M)],
            focus=ONSET,
            onset=ONSET,
            seed=8,
        )
    )
    a = Agent("node-1:9957", [Target("data", "nvme0n1", [nvme_qd1(), nvme_qd32(), nvme_1m()])])
    t = a.targets[0]
    out.append(
        Scenario(
            "iops-drop",
            "IOPS of a 4k QD32 profile drops to 30% at 26 h (its latency rises accordingly); the other profiles stay as they were",
            [a],
            28 * H,
            effects=[Noise(0.2), Slower(1 / 0.3, start=ONSET, profile="randread-4k-qd32")],
            fires=[Fires("DiskprobeIOPSDrop", a, t, t.profiles[1], not_before=ONSET + 25 * M, by=ONSET + 40 * M)],
            focus=ONSET,
            onset=ONSET,
            seed=9,
        )
    )
    a = Agent("node-1:9957", [Target("data", "nvme0n1", [nvme_qd1(), nvme_qd32(), nvme_1m()])])
    t = a.targets[0]
    out.append(
        Scenario(
            "throughput-drop",
            "throughput of a 1M QD16 profile drops to 30% at 26 h; the 4k profiles stay as they were",
            [a],
            28 * H,
            effects=[Noise(0.2), Slower(1 / 0.3, start=ONSET, profile="read-1m-qd16")],
            fires=[Fires("DiskprobeThroughputDrop", a, t, t.profiles[2], not_before=ONSET + 25 * M, by=ONSET + 40 * M)],
            focus=ONSET,
            onset=ONSET,
            seed=10,
        )
    )
    a = Agent("node-3:9957", [Target("etcd", "nvme0n1", [etcd_wal(4e-3)], path="/var/lib/etcd/diskprobe.dat")])
    t = a.targets[0]
    out.append(
        Scenario(
            "etcd-slow-syncs",
            "fdatasync p99 of the etcd-wal profile 4 ms -> 16 ms (x4) from 2 h on, with +-20% noise throughout",
            [a],
            4 * H,
            effects=[Noise(0.2), Slower(4, start=2 * H)],
            fires=[Fires("DiskprobeSyncLatencyHigh", a, t, t.profiles[0], not_before=2 * H + 10 * M, by=2 * H + 20 * M)],
            focus=H,
            onset=2 * H,
            seed=19,
        )
    )
    a = Agent("node-3:9957", [Target("etcd", "nvme0n1", [etcd_wal(4e-3)], path="/var/lib/etcd/diskprobe.dat", interval=H)])
    t = a.targets[0]
    out.append(
        Scenario(
            "etcd-slow-syncs-hourly",
            "as etcd-slow-syncs, probed once an hour: it takes 3 slow runs, not 15 minutes",
            [a],
            9 * H,
            effects=[Noise(0.2), Slower(4, start=2 * H)],
            fires=[Fires("DiskprobeSyncLatencyHigh", a, t, t.profiles[0], not_before=4 * H, by=5 * H + 10 * M)],
            focus=H,
            onset=2 * H,
            seed=21,
        )
    )
    a = Agent("node-3:9957", [Target("etcd", "nvme0n1", [etcd_wal(4e-3)], path="/var/lib/etcd/diskprobe.dat")])
    out.append(
        Scenario(
            "etcd-sync-spikes",
            "every other run of the etcd-wal profile from 2 h on has an fdatasync p99 of 40 ms (4 ms otherwise): never 3 runs in a row",
            [a],
            4 * H,
            effects=[Noise(0.2), SlowSyncs(2, 40e-3, start=2 * H)],
            focus=H,
            onset=2 * H,
            seed=20,
        )
    )
    a = nvme()
    t = a.targets[0]
    out.append(
        Scenario(
            "half-failing",
            "every other run fails (open error, no I/O) from 2 h on",
            [a],
            5 * H,
            effects=[Noise(0.2), Failing(2, start=2 * H)],
            fires=[Fires("DiskprobeProbeFailing", a, t, t.profiles[0], not_before=2 * H + 15 * M, by=2 * H + 35 * M)],
            focus=H,
            onset=2 * H,
            seed=11,
        )
    )
    a = nvme(interval=H)
    t = a.targets[0]
    out.append(
        Scenario(
            "failing-hourly",
            "probed once an hour, every run fails from 2 h on: the third failed run fires",
            [a],
            8 * H,
            effects=[Noise(0.2), Failing(1, start=2 * H)],
            fires=[Fires("DiskprobeProbeFailing", a, t, t.profiles[0], not_before=4 * H, by=5 * H + 10 * M)],
            focus=H,
            onset=2 * H,
            seed=22,
        )
    )
    a = Agent(
        "node-1:9957",
        [
            Target("data", "nvme0n1", [nvme_qd1()], interval=M),
            Target("flaky", "nvme1n1", [nvme_qd1()], interval=M),
            Target("busy", "sda", [hdd_qd1()], interval=M),
        ],
    )
    flaky, busy = a.targets[1], a.targets[2]
    out.append(
        Scenario(
            "every-minute",
            "probed every minute, from 1 h on: every fifth run of data fails (2 of the last 10 runs, never 3), every other run of flaky fails, no run of busy finishes",
            [a],
            2 * H,
            effects=[Noise(0.2), Failing(5, start=H, target="data"), Failing(2, start=H, target="flaky"), Skipped(start=H, target="busy")],
            fires=[
                Fires("DiskprobeProbeFailing", a, flaky, flaky.profiles[0], not_before=H + 5 * M, by=H + 10 * M),
                Fires("DiskprobeProbeStale", a, busy, busy.profiles[0], not_before=H + 1, by=H + 5 * M),
            ],
            focus=H,
            onset=H,
            seed=23,
        )
    )
    a = nvme()
    t = a.targets[0]
    out.append(
        Scenario(
            "io-errors",
            "every run from 2 h on has 3 failed I/Os (result error, figures still exported)",
            [a],
            5 * H,
            effects=[Noise(0.2), IOErrors(3, start=2 * H)],
            fires=[Fires("DiskprobeIOErrors", a, t, t.profiles[0], not_before=2 * H + 1, by=2 * H + 15 * M)],
            focus=H,
            onset=2 * H,
            seed=12,
        )
    )
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1()]), Target("other", "nvme1n1", [nvme_qd1()])],
    )
    t = a.targets[0]
    out.append(
        Scenario(
            "vanished-target",
            "the disk under configured target data falls off the bus at 2 h (gone from diskstats, its runs fail); the other target goes on",
            [a],
            4 * H,
            effects=[Noise(0.2), Vanished(start=2 * H, target="data")],
            fires=[Fires("DiskprobeTargetVanished", a, t, not_before=2 * H + 5 * M, by=2 * H + 10 * M)],
            focus=H,
            onset=2 * H,
            seed=13,
        )
    )
    a = Agent(
        "node-1:9957",
        [
            Target("data", "nvme0n1", [nvme_qd1()], kind="block_device", fstype="", path="/dev/disk/by-id/nvme-data"),
            Target("other", "nvme1n1", [nvme_qd1()]),
        ],
        down=[(3 * H, 3 * H + 2 * M), (4 * H, 4 * H + 2 * M)],
    )
    t = a.targets[0]
    back = 5 * H + SCRAPE  # a scrape after an evaluation: the latest the rule can see it
    out.append(
        Scenario(
            "vanished-restarts",
            "the disk under configured block target data falls off the bus at 2 h; the agent restarts at 3 h and at 4 h (down 2 minutes each) and names the gone device again from its state directory; the disk is back at 5 h 30 s: one page, across both restarts, that ends within 10 minutes of the return",
            [a],
            7 * H,
            effects=[Noise(0.2), Vanished(start=2 * H, end=back, target="data")],
            fires=[Fires("DiskprobeTargetVanished", a, t, not_before=2 * H + 5 * M, by=2 * H + 10 * M, until=ends("DiskprobeTargetVanished", back))],
            focus=H,
            onset=2 * H,
            seed=41,
        )
    )
    a = Agent(
        "node-1:9957",
        [
            Target("data", "nvme0n1", [nvme_qd1()], kind="block_device", fstype="", path="/dev/disk/by-id/nvme-data", retired=3 * H + SCRAPE),
            Target("other", "nvme1n1", [nvme_qd1()]),
        ],
    )
    t = a.targets[0]
    out.append(
        Scenario(
            "vanished-retired",
            "the disk under configured block target data falls off the bus at 2 h and is retired ([retired] disks, at a reload) at 3 h 30 s, while the target stays configured: the page ends within 10 minutes; the target's runs fail from then on, a warning",
            [a],
            5 * H,
            effects=[Noise(0.2), Vanished(start=2 * H, target="data")],
            fires=[
                Fires("DiskprobeTargetVanished", a, t, not_before=2 * H + 5 * M, by=2 * H + 10 * M, until=ends("DiskprobeTargetVanished", t.retired)),
                # Its third failed run after the retirement (runs every 5 minutes, +-10%).
                Fires("DiskprobeProbeFailing", a, t, t.profiles[0], not_before=t.retired + 5 * M, by=t.retired + 20 * M),
            ],
            focus=H,
            onset=2 * H,
            seed=42,
        )
    )
    model = "SAMSUNG MZQL23T8HCLS-00A07"
    retired = 4 * H + SCRAPE  # a scrape after an evaluation: the latest the rule can see it
    a = Agent(
        "node-4:9957",
        [
            Target("disk-S6XNNA0R123456", "nvme0n1", [gentle()], kind="block_device", fstype="", path="/dev/nvme0n1", rule="disks", model=model, serial="S6XNNA0R123456", gone=2 * H + 10, retired=retired),
            Target("disk-S6XNNA0R654321", "nvme1n1", [gentle()], kind="block_device", fstype="", path="/dev/nvme1n1", rule="disks", model=model, serial="S6XNNA0R654321", gone=2 * H + 10),
            Target("disk-S6XNNA0R111111", "nvme2n1", [gentle()], kind="block_device", fstype="", path="/dev/nvme2n1", rule="disks", model=model, serial="S6XNNA0R111111"),
        ],
        down=[(3 * H, 3 * H + 2 * M)],
        rules=dict(disks="block"),
    )
    lost, kept = a.targets[0], a.targets[1]
    out.append(
        Scenario(
            "disk-retired",
            "two disks found by a block-device discovery rule fall off the bus at 2 h; the agent restarts at 3 h; at 4 h 30 s a reload retires one of them ([retired] disks, by serial): its page ends within 10 minutes, the other one's goes on",
            [a],
            6 * H,
            effects=[Noise(0.2)],
            fires=[
                Fires("DiskprobeDiskLost", a, lost, not_before=2 * H + 10 * M, by=2 * H + 15 * M, until=ends("DiskprobeDiskLost", retired)),
                Fires("DiskprobeDiskLost", a, kept, not_before=2 * H + 10 * M, by=2 * H + 15 * M),
            ],
            focus=H,
            onset=2 * H,
            seed=43,
        )
    )
    a = Agent(
        "node-4:9957",
        [
            Target("disk-S6XNNA0R123456", "nvme0n1", [gentle()], kind="block_device", fstype="", path="/dev/nvme0n1", rule="disks", model="SAMSUNG MZQL23T8HCLS-00A07", serial="S6XNNA0R123456", gone=2 * H + 10),
            Target("disk-S6XNNA0R654321", "nvme1n1", [gentle()], kind="block_device", fstype="", path="/dev/nvme1n1", rule="disks", model="SAMSUNG MZQL23T8HCLS-00A07", serial="S6XNNA0R654321"),
            Target("pv-pvc-3f1c", "nvme2n1", [gentle()], kind="block_device", fstype="ext4", path="/dev/nvme2n1", rule="pvcs", gone=2 * H + 30 * M),
        ],
        down=[(3 * H, 3 * H + 2 * M)],
        rules=dict(disks="block", pvcs="mount"),
    )
    t = a.targets[0]
    out.append(
        Scenario(
            "disk-lost",
            "a disk found by a block-device discovery rule falls off the bus at 2 h; a volume found by a mount rule moves away with its pod at 2.5 h; the agent restarts at 3 h (it keeps the lost disk in its state directory): one page, across the restart",
            [a],
            4 * H,
            effects=[Noise(0.2)],
            fires=[Fires("DiskprobeDiskLost", a, t, not_before=2 * H + 10 * M, by=2 * H + 15 * M)],
            focus=H,
            onset=2 * H,
            seed=24,
        )
    )
    model, serial = "SAMSUNG MZQL23T8HCLS-00A07", "S6XNNA0R777777"
    a = Agent(
        "node-1:9957",
        [Target("disk-" + serial, "nvme2n1", [gentle()], kind="block_device", fstype="", path="/dev/nvme2n1", rule="disks", model=model, serial=serial, gone=2 * H + 10)],
        rules=dict(disks="block"),
    )
    b = Agent(
        "node-2:9957",
        [
            Target("disk-S6XNNA0R888888", "nvme0n1", [gentle()], kind="block_device", fstype="", path="/dev/nvme0n1", rule="disks", model=model, serial="S6XNNA0R888888"),
            Target("disk-" + serial, "nvme1n1", [gentle()], kind="block_device", fstype="", path="/dev/nvme1n1", rule="disks", model=model, serial=serial, start=2 * H + 4 * M, attached=2 * H + 4 * M),
        ],
        rules=dict(disks="block"),
    )
    out.append(
        Scenario(
            "moved-volume",
            "a network volume probed by a block-device discovery rule on node-1 is detached at 2 h (node-1 reports it lost) and attached to node-2 4 minutes later, where the same rule probes it: no page",
            [a, b],
            4 * H,
            effects=[Noise(0.2)],
            fires=[],
            focus=H,
            onset=2 * H,
            seed=26,
        )
    )
    a = nvme()
    t = a.targets[0]
    hung = Hung(start=2 * H, target="data")
    out.append(
        Scenario(
            "hung-device",
            "the device hangs at 2 h: the next run times out with its I/O held by the kernel, later runs are skipped while it is held; pages critical within 10 minutes of the held I/O",
            [a],
            4 * H,
            effects=[Noise(0.2), hung],
            hooks=[hung.stuck],
            fires=[
                Fires("DiskprobeIOHung", a, t, t.profiles[0], not_before=2 * H + 5 * M, by=2 * H + 10 * M),
                Fires("DiskprobeProbeStale", a, t, t.profiles[0], not_before=2 * H + 17 * M, by=2 * H + 30 * M),
            ],
            focus=H,
            onset=2 * H,
            seed=27,
        )
    )
    a = nvme()
    t = a.targets[0]
    out.append(
        Scenario(
            "intermittent-io-errors",
            "from 2 h every sixth run has failed I/Os: 1 or 2 of the last 10 runs, coming and going; one page, held through the dips",
            [a],
            10 * H,
            effects=[Noise(0.2), IOErrorsEvery(6, 2, start=2 * H)],
            fires=[Fires("DiskprobeIOErrors", a, t, t.profiles[0], not_before=2 * H + 1, by=3 * H + 20 * M)],
            focus=H,
            onset=2 * H,
            seed=28,
        )
    )
    a = Agent("node-1:9957", [Target("data", "nvme0n1", [nvme_qd1()], interval=M)], diskstats_fails=H)
    t = a.targets[0]
    out.append(
        Scenario(
            "diskstats-fails",
            "from 1 h the agent's diskstats collector fails (no disk series) and every other run of data fails: the failing probe pages, no target is reported vanished",
            [a],
            2 * H,
            effects=[Noise(0.2), Failing(2, start=H, target="data")],
            fires=[Fires("DiskprobeProbeFailing", a, t, t.profiles[0], not_before=H + 5 * M, by=H + 10 * M)],
            focus=H,
            onset=H,
            seed=29,
        )
    )
    twice = [dict(service="diskprobe-exporter"), {}]
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1()]), Target("busy", "sdc", [hdd_qd1()])],
        copies=twice,
    )
    t, busy = a.targets
    out.append(
        Scenario(
            "duplicate-scrape",
            "one agent scraped twice (a ServiceMonitor and a PodMonitor): NVMe x4 at 26 h and runs of another target skipped from 26 h; every rule evaluates and each alert fires once per scrape",
            [a],
            28 * H,
            effects=[Noise(0.2), Slower(4, start=ONSET, target="data"), Skipped(start=ONSET, target="busy")],
            fires=[
                Fires("DiskprobeLatencyRegression", a, t, t.profiles[0], not_before=ONSET + 25 * M, by=ONSET + 40 * M, extra=x)
                for x in twice
            ]
            + [
                Fires("DiskprobeProbeStale", a, busy, busy.profiles[0], not_before=ONSET + 10 * M, by=ONSET + 25 * M, extra=x)
                for x in twice
            ],
            focus=ONSET,
            onset=ONSET,
            seed=14,
        )
    )
    a = nvme()
    t = a.targets[0]
    out.append(
        Scenario(
            "stale",
            "runs are skipped (the duty-cycle budget is used up) from 2 h on: no run finishes",
            [a],
            4 * H,
            effects=[Noise(0.2), Skipped(reason="budget", start=2 * H)],
            fires=[Fires("DiskprobeProbeStale", a, t, t.profiles[0], not_before=2 * H + 10 * M, by=2 * H + 25 * M)],
            focus=H,
            onset=2 * H,
            seed=15,
        )
    )
    a = nvme(interval=H)
    t = a.targets[0]
    out.append(
        Scenario(
            "stale-hourly",
            "probed once an hour, runs are skipped from 2 h on: stale after 3.5 intervals, not 15 minutes",
            [a],
            8 * H,
            effects=[Noise(0.2), Skipped(start=2 * H)],
            fires=[Fires("DiskprobeProbeStale", a, t, t.profiles[0], not_before=4 * H + 20 * M, by=5 * H + 35 * M)],
            focus=H,
            onset=2 * H,
            seed=25,
        )
    )
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1()]), Target("hung", "sdd", [hdd_qd1()])],
    )
    t = a.targets[1]
    out.append(
        Scenario(
            "never-ran",
            "target hung never finishes a run (its open hangs: every cycle is skipped)",
            [a],
            2 * H,
            effects=[Noise(0.2), Skipped(target="hung")],
            fires=[Fires("DiskprobeProbeAbsent", a, t, not_before=29 * M, by=35 * M)],
            focus=20 * M,
            seed=16,
        )
    )
    a = nvme()
    out.append(
        Scenario(
            "exporter-down",
            "the agent stops answering at 1 h for 30 min, then comes back",
            [Agent(a.instance, a.targets, down=[(H, H + 30 * M)])],
            2 * H,
            effects=[Noise(0.2)],
            fires=[],
            focus=50 * M,
            onset=H,
            seed=17,
        )
    )
    down = out[-1].agents[0]
    out[-1].fires = [Fires("DiskprobeExporterDown", down, not_before=H + M, by=H + 5 * M, until=H + 30 * M)]
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1()]), Target("spin", "sda", [hdd_qd1()])],
    )
    out.append(
        Scenario(
            "saturated",
            "from 1 h on nvme0n1 queues 12 I/Os on average (busy 100%); sda is busy 100% with a queue of 1.5",
            [a],
            3 * H,
            effects=[Noise(0.2)],
            queues=[Queue("nvme0n1", 12, 1.0, start=H), Queue("sda", 1.5, 1.0, start=H)],
            fires=[Fires("DiskprobeDiskSaturated", a, device="nvme0n1", not_before=H + 30 * M, by=H + 40 * M)],
            focus=H,
            onset=H,
            seed=18,
        )
    )
    out += headroom.scenarios(sys.modules[__name__])
    return out


def table():
    lines = [
        "| scenario | what happens | onset | alerts that fire, relative to the onset (all others stay silent throughout) |",
        "|---|---|---|---|",
    ]
    lines += [s.row() for s in scenarios()]
    lines += fleet.rows()
    return "\n".join(lines)


def main(argv):
    argv = list(argv)
    if "--engine" in argv:
        # Expected values for this engine (common.py, "The engine"); prometheus2 by default.
        i = argv.index("--engine")
        if i + 1 >= len(argv):
            print(__doc__, file=sys.stderr)
            return 2
        set_engine(argv[i + 1])
        del argv[i : i + 2]
    if argv[1:] == ["--table"]:
        print(table())
        return 0
    if len(argv) == 4 and argv[1] == "--chaos":
        with open(argv[3], "w") as f:
            json.dump(for_engine(chaos.suite(int(argv[2]))), f)
        return 0
    if len(argv) == 4 and argv[1] == "--fleet":
        seed = None if argv[2] == "exact" else int(argv[2])
        with open(argv[3], "w") as f:
            json.dump(for_engine(fleet.suite(seed)), f)
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    suite = dict(
        rule_files=[RULES],
        evaluation_interval=f"{EVAL}s",
        group_eval_order=GROUP_ORDER,
        tests=[s.test_group() for s in scenarios()],
    )
    with open(argv[1], "w") as f:
        json.dump(for_engine(suite), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
