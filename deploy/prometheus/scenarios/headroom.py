"""Headroom scenarios of the one-target suite (expect.py): disks sold with an IOPS or throughput
limit, a workload that uses some share of it, and the alerts DiskprobeNearLimit and
DiskprobeThrottled (deploy/prometheus/rules.yml, groups diskprobe.headroom and
diskprobe.headroom.hourly); and EBS volumes whose own statistics (diskprobe_cloud_*, group
diskprobe.cloud) say how much of the time they spent over their limits or their instance's.

The model of model.py runs the probes; a `Disks` hook adds what the agent exports about the disks
at every scrape: their diskstats (the workload's I/O plus the probes' own, as the kernel counts
both), their declared limits, `diskprobe_target_disk_info`, `diskprobe_io_bytes_total` and the
node ceiling. Workloads change on 5-minute boundaries and counters grow linearly between scrapes,
so the rules' rates over windows that start and end on scrapes are exact, and the expected
annotations are computed from the same samples. Each scenario is one `@scenario` function, most
of them a call of `one_disk`. Standard library only.
"""

from dataclasses import dataclass, field

import facts
from common import JOB, humanize, humanize_duration, prom_rate, quantile, range_points
from expect import Fires, Scenario, scenario
from model import EVAL, Agent, Noise, Skipped, Slower, Target, builtin

H = 3600
M = 60
ONSET = 3 * H  # two hours of calm history first (a day is not needed: the window holds them)
GENTLE = "randread-4k-qd1-gentle"  # the built-in gentle read probe
CAPACITY = "randread-4k-qd32"  # a built-in capacity probe



@dataclass
class Disk:
    """A whole disk: its identity, limits, the targets whose I/O lands on it, and its workload."""

    name: str
    serial: str
    targets: list  # names of the targets on it
    iops_limit: int = 0  # declared (0: none)
    bytes_limit: int = 0
    load: list = field(default_factory=list)  # [(from, iops, bytes per second)], in time order
    node_member: bool = False
    # The cloud's statistics ([cloud_stats]): None when the agent exports none for the disk, else
    # [(from, {(scope, limit): share of the time over it})], in time order.
    cloud: list = None

    def exceeded(self, t):
        """The shares of the time over each limit at `t`, as the cloud counts them."""
        current = {}
        for start, shares in self.cloud or []:
            if start <= t:
                current = shares
        return current

    def workload(self, t):
        """I/Os and bytes per second at `t`."""
        current = (0, 0)
        for start, iops, bps in self.load:
            if start <= t:
                current = (iops, bps)
        return current


class Disks:
    """A hook (Scenario.hooks) that exports the disks of one agent, and its node ceiling."""

    def __init__(self, instance, disks, node_iops=0):
        self.instance, self.disks, self.node_iops = instance, disks, node_iops
        self.done = {}  # disk name -> (time, I/Os, bytes) of the workload so far
        self.over = {}  # disk name -> (time, {(scope, limit): seconds over it so far})

    def __call__(self, sim, agent, base, state, t):
        if agent.instance != self.instance:
            return
        targets = {target.name: target for target in agent.targets}
        for target in agent.targets:
            for profile in target.profiles:
                st = state.get((target.name, profile.name))
                if st is not None:
                    p = dict(base, target=target.name, profile=profile.name, device=target.device)
                    sim.put("diskprobe_io_bytes_total", p, st.ios * profile.block_size)
        for disk in self.disks:
            at, ios, nbytes = self.done.get(disk.name, (0, 0.0, 0.0))
            iops, bps = disk.workload(at)
            ios, nbytes = ios + iops * (t - at), nbytes + bps * (t - at)
            self.done[disk.name] = (t, ios, nbytes)
            probe_ios = probe_bytes = 0
            for name in disk.targets:
                for profile in targets[name].profiles:
                    st = state.get((name, profile.name))
                    if st is not None:
                        probe_ios += st.ios
                        probe_bytes += st.ios * profile.block_size
            d = dict(base, device=disk.name)
            sim.put("diskprobe_disk_reads_completed_total", d, 1_000_000 + ios + probe_ios)
            sim.put("diskprobe_disk_writes_completed_total", d, 5_000)
            sim.put("diskprobe_disk_read_bytes_total", d, 4_096_000_000 + nbytes + probe_bytes)
            sim.put("diskprobe_disk_written_bytes_total", d, 20_480_000)
            sim.put("diskprobe_disk_io_now", d, 1)
            ident = dict(d, serial=disk.serial)
            if disk.iops_limit:
                sim.put("diskprobe_disk_limit_iops", dict(ident, source="config"), disk.iops_limit)
            if disk.bytes_limit:
                sim.put("diskprobe_disk_limit_bytes_per_second", dict(ident, source="config"), disk.bytes_limit)
            for name in disk.targets:
                # An agent that reads the cloud's volume id exports it too (older ones do not).
                volume = "vol-" + disk.serial[3:] if disk.serial.startswith("vol") else ""
                sim.put("diskprobe_target_disk_info", dict(ident, target=name, volume_id=volume), 1)
            if self.node_iops and disk.node_member:
                sim.put("diskprobe_node_limit_device_info", ident, 1)
            if disk.cloud is not None:
                at, seconds = self.over.get(disk.name, (0, {}))
                shares = disk.exceeded(at)
                seconds = {k: seconds.get(k, 0.0) + shares.get(k, 0.0) * (t - at) for k in CLOUD_LIMITS}
                self.over[disk.name] = (t, seconds)
                volume = "vol-" + disk.serial[3:]
                for (scope, limit), v in seconds.items():
                    cloud = dict(ident, volume_id=volume, scope=scope, limit=limit)
                    sim.put("diskprobe_cloud_limit_exceeded_seconds_total", cloud, 1_000 + v)
        if self.node_iops:
            sim.put("diskprobe_node_limit_iops", dict(base, source="config"), self.node_iops)


CLOUD_LIMITS = [("volume", "iops"), ("volume", "throughput"), ("instance", "iops"), ("instance", "throughput")]


def rate(sim, name, labels, ts, seconds=240):
    """rate(name{labels}[4m]) at `ts` (or over `seconds`), as the engine computes it from the
    samples its range holds."""
    values = sim.values(name, **labels)
    points = [(s, values[s // 30]) for s in range_points(ts - seconds, ts, 30) if values[s // 30] is not None]
    return prom_rate(points, ts - seconds, ts)


def share_near(value, expected):
    """`value`, a share the model computed, after checking that it is `expected` but for the last
    digits of a float (the order of an engine's float operations)."""
    if abs(value - expected) > 1e-9:
        raise ValueError(f"the model's share is {value}, not {expected}: the scenario no longer says what it means")
    return value


def go_percentage(v):
    """Go's humanizePercentage."""
    return "%.4g%%" % (v * 100)


def workload_iops(sim, hook, disk, ts):
    """diskprobe:disk_workload_iops:rate4m of `disk` at `ts`."""
    d = dict(job="diskprobe", instance=hook.instance, device=disk.name)
    total = rate(sim, "diskprobe_disk_reads_completed_total", d, ts) + rate(
        sim, "diskprobe_disk_writes_completed_total", d, ts
    )
    for name in disk.targets:
        target = next(t for t in sim.s.agents[0].targets if t.name == name)
        for profile in target.profiles:
            p = dict(job="diskprobe", instance=hook.instance, target=name, profile=profile.name, device=target.device)
            total -= rate(sim, "diskprobe_ios_total", p, ts)
    return max(total, 0.0)


def gentle_p99(sim, agent, disk, extra, ts):
    """The largest p99 of the last runs of the gentle profiles on `disk` at `ts`."""
    vals = [
        sim.at(ts, "diskprobe_probe_latency_seconds", job=JOB, instance=agent.instance, target=t.name, profile=p.name, device=t.device, stat="p99", **extra)
        for t in agent.targets
        if t.name in disk.targets
        for p in t.profiles
        if p.rate_iops
    ]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def calm_level(sim, hook, agent, disk, extra, ts):
    """max of diskprobe:probe_latency_p99:calm_median_1d over the gentle profiles on `disk` at
    `ts`, as the rules record it at every evaluation (every EVAL seconds in the suite): the p99
    at evaluations where the disk is under half of its limit (calm), their median over each hour,
    and those medians' median over a day. None where there is none (no limit: no calm)."""
    if not disk.iops_limit:
        return None
    step = EVAL

    def calm(s):
        if s < 240 or workload_iops(sim, hook, disk, s) / disk.iops_limit >= 0.5:
            return None
        return gentle_p99(sim, agent, disk, extra, s)

    def window(f, t, span):
        vals = [f(s) for s in range_points(t - span, t, step)]
        return [v for v in vals if v is not None]

    def median_1h(t):
        vals = window(calm, t, H)
        return quantile(0.5, vals) if vals else None

    vals = window(median_1h, ts, 24 * H)
    return quantile(0.5, vals) if vals else None


class NearLimit(Fires):
    """DiskprobeNearLimit for a disk (`disk`, with the `limit` and its `source`), or for the
    node's ceiling (`disk` None): its value is the consumed share at the checkpoint."""

    def __init__(self, agent, hook, disk, limit, source, **kw):
        if source != "config":
            raise ValueError("only declared limits page (a measured one informs)")
        super().__init__("DiskprobeNearLimit", agent, **kw)
        self.hook, self.disk, self.limit, self.source = hook, disk, limit, source

    def labels(self):
        base = dict(job=JOB, instance=self.agent.instance, **self.extra)
        if self.disk is None:
            return dict(base, limit=self.limit, source=self.source)
        return dict(base, device=self.disk.name, serial=self.disk.serial, limit=self.limit, source=self.source)

    def share(self, sim, ts):
        if self.disk is None:
            used = sum(workload_iops(sim, self.hook, d, ts) for d in self.hook.disks if d.node_member)
            return used / self.hook.node_iops
        return workload_iops(sim, self.hook, self.disk, ts) / self.disk.iops_limit

    def expected(self, sim, ts):
        labels = {k: str(v) for k, v in self.labels().items() if v != ""}
        labels["severity"] = "warning"
        value = go_percentage(self.share(sim, ts))
        inst = self.agent.instance
        h = humanize
        if self.disk is None:
            used = sum(workload_iops(sim, self.hook, d, ts) for d in self.hook.disks if d.node_member)
            figures = f" ({h(used)} I/Os per second of a limit of {h(self.hook.node_iops)} I/Os per second)"
            ann = dict(
                summary=f"Disks near the node's {self.limit} limit on {inst}",
                description=f"Together, the disks under the node's ceiling have used 90% or more of its {self.limit} limit for 15m, {value} now{figures}; beyond it the platform queues I/O.",
            )
        else:
            dev = self.disk.name
            used = workload_iops(sim, self.hook, self.disk, ts)
            # The rule's share is used / limit; the annotation divides used by it again.
            limit = used / (used / self.disk.iops_limit)
            figures = f" ({h(used)} I/Os per second of a limit of {h(limit)} I/Os per second)"
            ann = dict(
                summary=f"Disk {dev} near its {self.limit} limit on {inst}",
                description=f"The workload on {dev} has used 90% or more of the disk's {self.limit} limit ({self.source}) for 15m, {value} now{figures}; beyond it the platform queues I/O.",
            )
        return dict(exp_labels=labels, exp_annotations=ann)



class Throttled(Fires):
    """DiskprobeThrottled for `disk`."""

    def __init__(self, agent, hook, disk, **kw):
        super().__init__("DiskprobeThrottled", agent, **kw)
        self.hook, self.disk = hook, disk

    def labels(self):
        return dict(job=JOB, instance=self.agent.instance, device=self.disk.name, serial=self.disk.serial, **self.extra)

    def expected(self, sim, ts):
        labels = {k: str(v) for k, v in self.labels().items() if v != ""}
        labels["severity"] = "warning"
        dev = self.disk.name
        share = workload_iops(sim, self.hook, self.disk, ts) / self.disk.iops_limit
        ann = dict(
            summary=f"Disk {dev} throttled on {self.agent.instance}",
            description=f"{dev} has been at 90% or more of a limit for 10m ({go_percentage(share)} now) and its gentle probe's p99 latency more than 3 times its level at under half load{throttled_figures(sim, self.hook, self.agent, self.disk, ts)}: the platform is queueing its I/O.",
        )
        return dict(exp_labels=labels, exp_annotations=ann)



def throttled_figures(sim, hook, agent, disk, ts):
    """DiskprobeThrottled's " (gentle probe's p99 P now, C when calm)", each where it exists (the
    annotation takes the largest of every scrape of the agent)."""
    copies = [c for c in agent.copies] if getattr(agent, "copies", None) else [{}]
    p99s = [v for v in (gentle_p99(sim, agent, disk, x, ts) for x in copies) if v is not None]
    if not p99s:
        return ""
    calms = [v for v in (calm_level(sim, hook, agent, disk, x, ts) for x in copies) if v is not None]
    calm = f", {humanize_duration(max(calms))} when calm" if calms else ""
    return f" (gentle probe's p99 {humanize_duration(max(p99s))} now{calm})"


class CloudThrottled(Fires):
    """DiskprobeThrottled from the cloud's statistics of `disk`, for `scope` (volume or
    instance): its value is the share of the last 5 minutes over the scope's limits."""

    def __init__(self, agent, hook, disk, scope, **kw):
        super().__init__("DiskprobeThrottled", agent, **kw)
        self.hook, self.disk, self.scope = hook, disk, scope

    def labels(self):
        return dict(
            job=JOB,
            instance=self.agent.instance,
            device=self.disk.name,
            serial=self.disk.serial,
            volume_id="vol-" + self.disk.serial[3:],
            scope=self.scope,
            **self.extra,
        )

    def share(self, sim, ts):
        d = dict(job=JOB, instance=self.agent.instance, device=self.disk.name, serial=self.disk.serial, volume_id="vol-" + self.disk.serial[3:], **self.extra)
        return max(
            rate(sim, "diskprobe_cloud_limit_exceeded_seconds_total", dict(d, scope=self.scope, limit=limit), ts, seconds=300)
            for limit in ("iops", "throughput")
        )

    def expected(self, sim, ts):
        labels = {k: str(v) for k, v in self.labels().items() if v != ""}
        labels["severity"] = "warning"
        dev, volume = self.disk.name, "vol-" + self.disk.serial[3:]
        over = (
            "the volume's provisioned IOPS or throughput"
            if self.scope == "volume"
            else "the instance's EBS IOPS or throughput limit"
        )
        why = (
            "the volume's own limit queues its I/O."
            if self.scope == "volume"
            else "the instance's limit over all its volumes queues the I/O."
        )
        at = "the volume's limit" if self.scope == "volume" else "the instance's limit"
        figures = throttled_figures(sim, self.hook, self.agent, self.disk, ts)
        ann = dict(
            summary=f"Disk {dev} throttled at {at} on {self.agent.instance}",
            description=f"{dev} (volume {volume}) spent {go_percentage(self.share(sim, ts))} of the last 5 minutes over {over}, 10% or more for 10m, as the cloud reports it{figures}: {why}",
        )
        return dict(exp_labels=labels, exp_annotations=ann)



def capacity_qd32(iops):
    """A capacity profile on a capped disk: it reads the cap, whatever the run."""
    return builtin(CAPACITY, p99=15e-3, iops=iops)


def cloud_gentle():
    """The gentle read probe on a cloud disk (the built-in, at its rate cap), p99 2 ms when
    calm."""
    return builtin(GENTLE, p99=2e-3, iops=facts.get().profile(GENTLE)["rate_iops"])


# ---------------------------------------------------------------------------------------------
# The scenarios: each a function that returns one (expect.scenario adds it to the suite).

CALM = (0, 900, 0)  # 30% of a 3,000 IOPS cap, before the onset


def one_disk(name, says, load, iops_limit=3000, seed=0, fires=(), profiles=None, effects=(), copies=None, promql=(), cloud=None, before=CALM):
    """A cloud data disk sdb with a filesystem on sdb1 and a probe file on it; `before` is
    its workload before the onset."""
    profiles = profiles or [cloud_gentle()]
    target = Target("data", "sdb1", profiles)
    agent = Agent("node-4:9957", [target], **({"copies": copies} if copies else {}))
    disk = Disk("sdb", "vol0a1b2c3d", ["data"], iops_limit=iops_limit, load=[before] + load, cloud=cloud)
    hook = Disks(agent.instance, [disk])
    expected = [f(agent, hook, disk, target) for f in fires]
    return Scenario(
        name,
        says,
        [agent],
        ONSET + 2 * H,
        effects=[Noise(0.2, profile="randread-4k-qd1-gentle")] + list(effects),
        fires=[x for e in expected for x in (e if isinstance(e, list) else [e])],
        focus=ONSET - H,
        onset=ONSET,
        seed=seed,
        hooks=[hook],
        promql=[p(agent, hook, disk) for p in promql],
    )


def share_check(source, value):
    """A check that sdb's consumed IOPS share of its `source` limit (config: declared; probe:
    what its capacity runs read) is `value` an hour past the onset, as the engine computes it
    from the samples its range holds (`share_near`: checked when the suite is written)."""

    def check(a, h, d):
        def at(sim):
            limit = d.iops_limit if source == "config" else next(p.iops for p in a.targets[0].profiles if p.iodepth > 1)
            return dict(
                expr='diskprobe:disk_limit_consumed:ratio_rate4m{device="sdb"}',
                eval_time=f"{(ONSET + H) // M}m",
                exp_samples=[
                    dict(
                        labels=f'diskprobe:disk_limit_consumed:ratio_rate4m{{device="sdb",instance="node-4:9957",job="diskprobe",limit="iops",serial="vol0a1b2c3d",source="{source}"}}',
                        value=share_near(workload_iops(sim, h, d, ONSET + H) / limit, value),
                    )
                ],
            )

        return at

    return check


def near():
    """DiskprobeNearLimit for sdb's declared IOPS limit, from 15 to 25 minutes after the onset."""
    return lambda a, h, d, t: NearLimit(a, h, d, "iops", "config", not_before=ONSET + 15 * M, by=ONSET + 25 * M)


# Measured: capacity runs complete while the disk is calm (before the onset; a busy disk
# skips them), their median is the limit; it informs (dashboards, annotations) and never
# pages: a measured limit is not a cap.
def measured_limit(value):
    """A check that the measured IOPS limit of sdb is `value` an hour past the onset."""
    return lambda a, h, d: dict(
        expr="diskprobe:disk_limit_iops:probe",
        eval_time=f"{(ONSET + H) // M}m",
        exp_samples=[
            dict(
                labels='diskprobe:disk_limit_iops:probe{device="sdb",instance="node-4:9957",job="diskprobe",serial="vol0a1b2c3d",source="probe"}',
                value=value,
            )
        ],
    )


@scenario
def near_limit():
    return one_disk(
        "near-limit",
        "a disk sold with 3,000 IOPS (a partition target on it) does 900 IOPS, then 2,850 (95%) from 3 h on; the gentle probe's latency stays as it was",
        [(ONSET, 2850, 0)],
        seed=30,
        fires=[near()],
        promql=[
            # The share is the workload's own, the probes' I/O subtracted, on the whole disk.
            share_check("config", 0.95),  # 2,850 of 3,000 IOPS
            lambda a, h, d: dict(
                expr='diskprobe:disk_throttled:bool{device="sdb"}',
                eval_time=f"{(ONSET + H) // M}m",
                exp_samples=[
                    dict(labels='diskprobe:disk_throttled:bool{device="sdb",instance="node-4:9957",job="diskprobe",serial="vol0a1b2c3d"}', value=0)
                ],
            ),
        ],
    )


# At the line: 90% of the cap pages after 15 minutes (just over it), just under it nothing.
@scenario
def near_limit_edge():
    return one_disk(
        "near-limit-edge",
        "a disk sold with 3,000 IOPS does 2,703 (90.1%) from 3 h on: just over the 90% line",
        [(ONSET, 2703, 0)],
        seed=44,
        fires=[near()],
        promql=[share_check("config", 0.901)],
    )


@scenario
def below_limit_edge():
    return one_disk(
        "below-limit-edge",
        "a disk sold with 3,000 IOPS does 2,697 (89.9%) from 3 h on: just under the 90% line",
        [(ONSET, 2697, 0)],
        seed=45,
        promql=[share_check("config", 0.899)],
    )


@scenario
def near_limit_burst():
    return one_disk(
        "near-limit-burst",
        "a disk sold with 3,000 IOPS at 100% for 10 minutes at 3 h, 30% before and after",
        [(ONSET, 3000, 0), (ONSET + 10 * M, 900, 0)],
        seed=31,
    )


@scenario
def half_limit():
    return one_disk(
        "half-limit",
        "a disk sold with 3,000 IOPS does 1,500 (50%) from 3 h on",
        [(ONSET, 1500, 0)],
        seed=32,
    )


@scenario
def no_limit():
    return one_disk(
        "no-limit",
        "a disk without a declared limit and without capacity probes does 2,850 IOPS from 3 h on",
        [(ONSET, 2850, 0)],
        iops_limit=0,
        seed=33,
        promql=[
            lambda a, h, d: dict(
                expr="diskprobe:disk_limit_consumed:max_ratio_rate4m or diskprobe:disk_throttled:bool",
                eval_time=f"{(ONSET + H) // M}m",
                exp_samples=[],
            )
        ],
    )


@scenario
def throttled():
    twice = [dict(service="diskprobe-exporter"), {}]
    return one_disk(
        "throttled",
        "demand beyond a 3,000 IOPS cap from 3 h on: the disk does 3,000 (100%) and the gentle probe's p99 goes 2 ms -> 12 ms; the agent is scraped twice",
        [(ONSET, 3000, 0)],
        seed=34,
        effects=[Slower(6, start=ONSET, profile="randread-4k-qd1-gentle")],
        copies=twice,
        fires=[
            lambda a, h, d, t: [
                NearLimit(a, h, d, "iops", "config", not_before=ONSET + 15 * M, by=ONSET + 25 * M, extra=x) for x in twice
            ],
            lambda a, h, d, t: [
                Throttled(a, h, d, not_before=ONSET + 10 * M, by=ONSET + 25 * M, extra=x) for x in twice
            ],
        ],
    )


# The cloud's own word (EBS statistics, [cloud_stats]): where it exists, it decides.
@scenario
def cloud_throttled():
    return one_disk(
        "cloud-throttled",
        "an EBS volume without a declared limit reports 40% of the time over its provisioned IOPS and 15% over the instance's EBS throughput from 3 h on; the gentle probe's p99 goes 2 ms -> 12 ms",
        [(ONSET, 2850, 0)],
        iops_limit=0,
        seed=37,
        effects=[Slower(6, start=ONSET, profile="randread-4k-qd1-gentle")],
        cloud=[(0, {}), (ONSET, {("volume", "iops"): 0.4, ("instance", "throughput"): 0.15})],
        fires=[
            lambda a, h, d, t: CloudThrottled(a, h, d, "volume", not_before=ONSET + 10 * M, by=ONSET + 20 * M),
            lambda a, h, d, t: CloudThrottled(a, h, d, "instance", not_before=ONSET + 10 * M, by=ONSET + 20 * M),
        ],
        promql=[
            lambda a, h, d: dict(
                expr='diskprobe:cloud_throttled:ratio_rate5m{scope="volume"}',
                eval_time=f"{(ONSET + H) // M}m",
                exp_samples=[
                    dict(
                        labels='diskprobe:cloud_throttled:ratio_rate5m{device="sdb",instance="node-4:9957",job="diskprobe",scope="volume",serial="vol0a1b2c3d",volume_id="vol-0a1b2c3d"}',
                        value=0.4,
                    )
                ],
            ),
        ],
    )


@scenario
def cloud_below_limits():
    return one_disk(
        "cloud-below-limits",
        "an EBS volume sold with 3,000 IOPS does 900 and reports 2% of the time over its provisioned IOPS from 3 h on (a burst now and then): nothing fires",
        [(ONSET, 900, 0)],
        seed=38,
        cloud=[(0, {}), (ONSET, {("volume", "iops"): 0.02})],
    )


@scenario
def cloud_not_throttled():
    return one_disk(
        "cloud-not-throttled",
        "demand at a 3,000 IOPS cap with the gentle probe's p99 at 12 ms from 3 h on, but the volume's statistics report no time over any limit: the cloud's word wins, DiskprobeThrottled stays silent",
        [(ONSET, 3000, 0)],
        seed=39,
        effects=[Slower(6, start=ONSET, profile="randread-4k-qd1-gentle")],
        cloud=[(0, {})],
        fires=[near()],
    )


@scenario
def near_measured_limit():
    return one_disk(
        "near-measured-limit",
        "no declared limit; capacity runs (4k QD32) read 3,000 IOPS while the disk is calm, then are skipped as busy from 3 h on, when it does 2,850 IOPS (95% of the measured limit, recorded for the dashboards): nothing pages, a measured limit is not a cap (and no stale alert for the skipped runs, by design)",
        [(ONSET, 2850, 0)],
        iops_limit=0,
        seed=35,
        profiles=[cloud_gentle(), capacity_qd32(3000)],
        effects=[Skipped(reason="busy", start=ONSET, profile="randread-4k-qd32")],
        promql=[measured_limit(3000), share_check("probe", 0.95)],
    )


# A healthy 7,200 rpm disk with no cap: its capacity runs measure 250 random 4k reads per
# second, and a nightly backup streams 150 MB/s in 256 KiB requests (600 per second, 240% of
# the measured figure). diskstats give the requests, not their pattern: nothing pages.
@scenario
def uncapped_hdd_backup():
    return one_disk(
        "uncapped-hdd-backup",
        "an HDD with no declared limit whose capacity runs (4k QD32) read 250 IOPS while it is calm; from 3 h on a backup streams 150 MB/s in 600 requests per second (2.4x the measured limit) and the gentle probe's p99 is 4x its calm level: no alert",
        [(ONSET, 600, 150_000_000)],
        iops_limit=0,
        before=(0, 40, 2_000_000),
        seed=40,
        profiles=[cloud_gentle(), capacity_qd32(250)],
        effects=[
            Skipped(reason="busy", start=ONSET, profile="randread-4k-qd32"),
            Slower(4, start=ONSET, profile="randread-4k-qd1-gentle"),
        ],
        promql=[measured_limit(250), share_check("probe", 2.4)],
    )


# A VM's ceiling over two disks: each at half its own cap, together above the VM's.
@scenario
def near_node_limit():
    b = Target("logs", "sdb", [cloud_gentle()], kind="block_device", fstype="")
    c = Target("data", "sdc", [cloud_gentle()], kind="block_device", fstype="")
    agent = Agent("node-5:9957", [b, c])
    disks = [
        Disk("sdb", "vol0b", ["logs"], iops_limit=3000, load=[CALM, (ONSET, 1500, 0)], node_member=True),
        Disk("sdc", "vol0c", ["data"], iops_limit=3000, load=[CALM, (ONSET, 1500, 0)], node_member=True),
    ]
    hook = Disks(agent.instance, disks, node_iops=3200)
    return Scenario(
        "near-node-limit",
        "a VM with a ceiling of 3,200 IOPS over two disks sold with 3,000 each: both do 1,500 from 3 h on (50% of their own, 94% of the VM's)",
        [agent],
        ONSET + 2 * H,
        effects=[Noise(0.2)],
        fires=[NearLimit(agent, hook, None, "iops", "config", not_before=ONSET + 15 * M, by=ONSET + 25 * M)],
        focus=ONSET - H,
        onset=ONSET,
        seed=36,
        hooks=[hook],
    )
