"""The exporter model of the one-target scenarios (expect.py, one_target.py, headroom.py): what
diskprobe_exporter is configured with (profiles, targets, agents), what happens to a run
(effects: noise, a slowdown, failures, a hung device, ...), and the agent as it exports the
outcome: a cycle of runs every interval with jitter, per-run gauges, counts of the last runs,
counters of runs, I/Os and errors, classic latency buckets, diskstats, discovery and `up`,
scraped every 30 s.

Every fact of the exposition (names, labels, the classic buckets' bounds, how many runs the
recent-run gauges count, the built-in profiles' settings) comes from the crate (facts.py); what
is modelled here is what happens, not what the agent says about it.

The model exports classic buckets only: promtool 2.42 does not accept native histograms in
`input_series` (it rejects the `{{schema:... buckets:[...]}}` notation). Of the rules only the
cloud latency recordings read a histogram (diskprobe_cloud_io_latency_seconds, classic or as
NHCB), which the model does not export; tests/it/prometheus_e2e.rs runs the rules and the
dashboards' queries on real Prometheus 2.42 and 3.5 servers, native histograms only among them,
and tests/it/cloud_stats.rs the cloud rules on classic buckets and NHCB. Standard library only.
"""

import bisect
import math
import random
from collections import deque
from dataclasses import dataclass, field

import facts
from common import JOB, encode, series_text

SCRAPE = 30  # seconds between scrapes
EVAL = 300  # seconds between rule evaluations in the suite
M = 60
H = 3600
DAY = 24 * H


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




def builtin(name, p99, iops, **kw):
    """A built-in profile of the agent (its rw, block size, queue depth and rate cap as the crate
    exports them), with a disk's healthy exact p99 (seconds) and IOPS of a run."""
    p = facts.get().profile(name)
    return Profile(name, p["rw"], p["block_size"], p["iodepth"], p99=p99, iops=iops, rate_iops=p["rate_iops"], **kw)


def etcd_wal(sync_p99):
    """etcd's WAL job: 2300-byte buffered writes, fdatasync after each (one sync per write)."""
    return builtin("etcd-wal", p99=40e-6, iops=1 / (sync_p99 / 2.5), sync_p99=sync_p99)


def nvme_qd1():
    return builtin("randread-4k-qd1", p99=150e-6, iops=9000)


def hdd_qd1():
    return builtin("randread-4k-qd1", p99=13e-3, iops=120)


def gentle():
    """A rate-capped latency profile of the operator's (not a built-in): its IOPS is the cap,
    whatever the disk can do."""
    return Profile("gentle-4k-qd1", "randread", 4096, 1, p99=2e-3, iops=150, rate_iops=150)


def nvme_qd32():
    return builtin("randread-4k-qd32", p99=900e-6, iops=40000)


def nvme_1m():
    return builtin("read-1m-qd16", p99=12e-3, iops=1600)


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
    buckets: list = field(default_factory=lambda: [0] * (len(facts.get().latency_bounds) + 1))
    latency_sum: float = 0.0
    syncs: int = 0
    sync_buckets: list = field(default_factory=lambda: [0] * (len(facts.get().sync_latency_bounds) + 1))
    sync_sum: float = 0.0
    last: dict = None
    skips: dict = field(default_factory=dict)  # reason -> when a run was last skipped for it
    # The last finished runs: (result, had I/O errors); the sync p99 of the last runs that synced.
    recent: deque = field(default_factory=lambda: deque(maxlen=facts.get().recent_runs))
    recent_sync: deque = field(default_factory=lambda: deque(maxlen=facts.get().recent_sync_runs))


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
            st.buckets[bisect.bisect_left(facts.get().latency_bounds, latency)] += count
            st.latency_sum += count * latency
        if profile.sync_p99:  # one sync after each write, distributed as the writes are
            st.syncs += n
            for count, latency in ((n90, sync_p99 / 2.5), (n9, sync_p99 * 0.9), (n - n90 - n9, sync_p99 * 1.2)):
                st.sync_buckets[bisect.bisect_left(facts.get().sync_latency_bounds, latency)] += count
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
            if len(st.recent_sync) == st.recent_sync.maxlen:
                self.put("diskprobe_probe_recent_sync_latency_seconds", dict(p, stat="p99"), min(st.recent_sync))
            self.put("diskprobe_ios_total", p, st.ios)
            self.put("diskprobe_io_errors_total", p, st.io_errors)
            self.put("diskprobe_probe_busy_seconds_total", p, st.busy)
            cumulative = 0
            for bound, count in zip(facts.get().latency_le + ["+Inf"], st.buckets):
                cumulative += count
                self.put("diskprobe_io_latency_seconds_bucket", dict(p, le=bound), cumulative)
            self.put("diskprobe_io_latency_seconds_count", p, cumulative)
            self.put("diskprobe_io_latency_seconds_sum", p, round(st.latency_sum, 9))
            if profile.sync_p99:
                self.put("diskprobe_syncs_total", p, st.syncs)
                cumulative = 0
                for bound, count in zip(facts.get().sync_latency_le + ["+Inf"], st.sync_buckets):
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
            out.append(dict(series=series_text(name, dict(labels)), values=encode(values)))
        return out


