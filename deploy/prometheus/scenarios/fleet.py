"""The fleet scenarios of deploy/prometheus/rules.yml: a week of probes on 41 disks of five models
on 11 nodes, scraped every minute, with fail-slow disks among healthy ones, drawn from a seed.

What happens is fixed; the seed draws everything else: which disk of its cohort plays each part,
each disk's own speed and workload, run-to-run noise and spikes, the phase of each node's daily
cycle, probe jitter, the node that restarts. A disk's p99 in one run of the gentle probe is its
model's p99 times its own bias, run-to-run noise (±30%, and 3% of runs 1.5-3x slower), its node's
daily cycle (±25%), its workload against its model's (0.3 more per 1x more), and whatever its
cohort or its own fault does.

The checks (`promql_expr_test` over the ALERTS series every rule evaluation wrote): at the end, the
set of alerts that ever fired is exactly the expected one (each fail-slow disk by the alert that
names it, the cohort-wide slowdown by its `info` alert, and nothing else: no healthy disk is ever
named, at any evaluation); each fail-slow disk is named at every evaluation from its deadline to
the end and at none before its onset; each runbook query of each alert that fires returns data.
A small deterministic cohort (no noise) checks the annotations of DiskprobeSlowerThanPeers and
DiskprobeCohortSlowdown exactly.

    generate.py fleet SEED OUT.json      # one seed's suite; then: promtool test rules OUT.json
    generate.py openmetrics DIR [--nodes N --base T --days D]   # bench/rules_cost.sh's fleet
"""

import math
import os
import random
from collections import defaultdict
from dataclasses import dataclass, field

import facts
from common import (
    GROUP_ORDER,
    edge_free,
    JOB,
    RULES,
    Track,
    fmt,
    humanize_duration,
    labels_text,
    quantile,
    runbook_tests,
    series_text,
    severity,
)

SCRAPE = 60  # seconds between scrapes
EVAL = 300  # seconds between rule evaluations in the suite (the shortest group interval)
M = 60
H = 3600
DAY = 24 * H
DURATION = 7 * DAY
INTERVAL = 300  # the probe interval (the default)
PROFILE = "randread-4k-qd1-gentle"


@dataclass
class Model:
    name: str  # sysfs model
    rotational: str
    p99: float  # healthy p99 of a gentle run, seconds
    iops: float  # typical workload of a disk: reads and writes completed per second
    kind: str  # kernel name prefix
    cohort: str = ""  # the operator's cohort (cloud volume types), when set
    storage_class: str = ""  # a PersistentVolume's StorageClass (kube-state-metrics), when one

    def key(self):
        if self.cohort or self.storage_class:
            return dict(cohort=self.cohort or self.storage_class)
        return dict(model=self.name, rotational=self.rotational)


NVME = Model("SAMSUNG MZQL23T8HCLS-00A07", "0", 180e-6, 600, "nvme")
SATA = Model("INTEL SSDSC2KB960G8", "0", 700e-6, 300, "sd")
HDD = Model("ST8000NM000A-2KE101", "1", 16e-3, 60, "sd")
RARE = Model("Micron_5300_MTFDDAK1T9TDS", "0", 900e-6, 150, "sd")
EBS = "Amazon Elastic Block Store"
GP2 = Model(EBS, "0", 2.4e-3, 150, "nvme", cohort="ebs-gp2")
GP3 = Model(EBS, "0", 1.1e-3, 150, "nvme", cohort="ebs-gp3")
IO2 = Model(EBS, "0", 0.5e-3, 150, "nvme", cohort="ebs-io2")


@dataclass
class Disk:
    node: "Node"
    model: Model
    serial: str
    slot: int  # position of its kernel name on the node at first boot
    bias: float = 1.0
    workload: float = 0.0
    added: int = 0  # when it was plugged in
    faults: list = field(default_factory=list)
    also: list = field(default_factory=list)  # further targets on it: files on its filesystem

    @property
    def pv(self):
        """Its PersistentVolume's name, when it is one."""
        return f"pvc-{self.serial[3:15]}" if self.model.storage_class else None

    @property
    def target(self):
        return f"pv-{self.pv}" if self.pv else f"disk-{self.serial}"

    def targets(self, kname):
        """(name, kind, path) of the targets on it."""
        return [(self.target, "block_device", f"/dev/{kname}")] + [(t, "file", f"/srv/{t}/probe.dat") for t in self.also]


@dataclass
class Node:
    name: str
    phase: float  # of its daily cycle, in days
    disks: list = field(default_factory=list)
    restarts: list = field(default_factory=list)  # (time, down seconds): agent restarts
    reboots: list = field(default_factory=list)  # (time, down seconds): kernel names swap
    rollout: int = None  # when a new pod replaces the agent's
    drained: int = None  # when it leaves the fleet for good (its agent and disks with it)

    @property
    def instance(self):
        return self.name


# ---------------------------------------------------------------------------------------------
# What happens to disks: faults of one disk and slowdowns of a whole cohort.


class Steady:
    """`factor` times slower from `onset` on."""

    def __init__(self, onset, factor):
        self.onset, self.factor = onset, factor

    def latency(self, v, t, rng):
        return v * self.factor if t >= self.onset else v


class Drift:
    """Slower by `per_day` (0.2: 20%) a day, compounded, from `start` on; its onset is when it is
    2x as slow."""

    def __init__(self, start, per_day):
        self.start, self.per_day = start, per_day
        self.onset = start + round(math.log(2) / math.log(1 + per_day) * DAY)

    def latency(self, v, t, rng):
        return v * (1 + self.per_day) ** ((t - self.start) / DAY) if t >= self.start else v


class Intermittent:
    """From `onset` on, each run is `factor` times slower with probability `p`."""

    def __init__(self, onset, p, factor):
        self.onset, self.p, self.factor = onset, p, factor

    def latency(self, v, t, rng):
        return v * self.factor if t >= self.onset and rng.random() < self.p else v


class Window:
    """`factor` times slower from `start` to `end` (an afternoon), as it was before and after."""

    def __init__(self, start, end, factor):
        self.start, self.end, self.factor = start, end, factor

    def latency(self, v, t, rng):
        return v * self.factor if self.start <= t < self.end else v


class OneSlowRun:
    """The first run at or after `at`: 7% of its I/Os took 90 ms (p99 90 ms)."""

    def __init__(self, at):
        self.at, self.done = at, False

    def latency(self, v, t, rng):
        if t >= self.at and not self.done:
            self.done = True
            return 0.09
        return v


class Busy:
    """From `start` on the disk serves `factor` times its workload (its diskstats say so), and
    its latency rises with it."""

    def __init__(self, start, factor):
        self.start, self.factor = start, factor

    def latency(self, v, t, rng):
        return v

    def load(self, t):
        return self.factor if t >= self.start else 1.0


@dataclass
class CohortSlowdown:
    """Every disk of `model` slower by `factor` (each run ±20%) from `start` to `end`, or every
    night from `hour` for `hours` when `nightly`; its workload times `load`."""

    model: Model
    factor: float
    start: int = 0
    end: int = DURATION
    nightly: bool = False
    hour: int = 0
    hours: int = 0
    load: float = 1.0

    def active(self, t):
        if self.nightly:
            return self.hour * H <= t % DAY < (self.hour + self.hours) * H
        return self.start <= t < self.end


# ---------------------------------------------------------------------------------------------
# The fleet and its parts, drawn from a seed.


@dataclass
class Part:
    """A part a disk plays in a fleet scenario: what it says, its onset, and the alert expected
    to name it (none for healthy parts), from when (`by`), after being silent until `silent`."""

    name: str
    says: str
    onset: int
    alert: str = None
    by: int = None
    silent: int = None
    disk: Disk = None


@dataclass
class Fleet:
    nodes: list
    parts: list
    events: list  # CohortSlowdown
    cohort_alerts: list  # (Model, from, to): DiskprobeCohortSlowdown expected to fire throughout
    duration: int = DURATION
    profiles: tuple = (PROFILE,)
    # Also the series no fleet check needs (IOPS and throughput of rate-capped profiles, p50, the
    # runs and I/O error counters): the bench measures every rule, the current and the earlier.
    full: bool = False

    def disks(self):
        return [d for n in self.nodes for d in n.disks]


def serial(rng, model):
    if model.name == EBS:
        return "vol" + "".join(rng.choice("0123456789abcdef") for _ in range(17))
    prefix = {"nvme": "S6", "sd": "BTYF" if model.rotational == "0" else "ZL"}[model.kind]
    return prefix + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(10))


def new_disk(rng, node, model, slot):
    """A disk of `model` plugged into `node`, with its own speed and workload drawn from `rng`."""
    d = Disk(node, model, serial(rng, model), slot=slot)
    d.bias = math.exp(rng.gauss(0, 0.06))
    d.workload = model.iops * min(2.0, max(0.5, math.exp(rng.gauss(0, 0.35))))
    node.disks.append(d)
    return d


def draw_fleet(seed):
    """The fleet of the scenario suite, from `seed`."""
    rng = random.Random(seed)
    nodes = [Node(f"node-{k:02d}", phase=0.6 + rng.uniform(-0.05, 0.05)) for k in range(1, 12)]

    def add(node, model, added=0):
        d = new_disk(rng, node, model, slot=len([x for x in node.disks if x.model.kind == model.kind]))
        d.added = added
        return d

    metal, cloud = nodes[:6], nodes[6:]
    for n in metal[:4]:
        add(n, NVME)
        add(n, NVME)
        add(n, SATA)
        add(n, SATA)
    for n in metal[:3]:
        add(n, RARE)
    for n in metal[4:]:
        for _ in range(3):
            add(n, HDD)
    for n in cloud:
        for model in (GP2, GP3, IO2):
            add(n, model)

    def pick(model, exclude=(), nodes=None):
        pool = [d for d in (nodes or [d for n in metal + cloud for d in n.disks]) if d.model is model]
        pool = [d for d in pool if d not in exclude and not d.faults and d.added == 0]
        return rng.choice(pool)

    parts = []

    def part(name, says, onset, disk, fault, alert=None, by=None, silent=None):
        disk.faults.append(fault)
        parts.append(Part(name, says, onset, alert, by, silent if silent is not None else onset, disk))

    reboot = metal[3]
    reboot.reboots.append((4 * DAY, 4 * M))
    steady = pick(NVME, nodes=reboot.disks)
    part(
        "steady",
        "an NVMe disk 2.5x slower than its peers from day 2 on; its node reboots on day 4 and swaps its kernel name with its neighbour's",
        2 * DAY,
        steady,
        Steady(2 * DAY, 2.5),
        "DiskprobeSlowerThanPeers",
        by=2 * DAY + 12 * H,
    )
    drift = Drift(1 * DAY, 0.25)
    part(
        "drift",
        "a SATA SSD 25% slower every day from day 1 on (2x its peers on day 4.1, 3.8x at the end)",
        drift.onset,
        pick(SATA),
        drift,
        "DiskprobeSlowerThanPeers",
        by=drift.onset + 12 * H,
        silent=drift.onset - round(math.log(2 / 1.5) / math.log(1.25) * DAY),
    )
    part(
        "intermittent",
        "an HDD whose runs are 3x slower one time in three from day 3 on (its cohort's nightly backup window slows every run of every disk)",
        3 * DAY,
        pick(HDD),
        Intermittent(3 * DAY, 1 / 3, 3.0),
        "DiskprobeSlowerThanPeers",
        by=3 * DAY + 16 * H,
    )
    born_node = rng.choice([n for n in metal[:4] if n is not reboot])
    born = add(born_node, NVME, added=2 * DAY + 12 * H)
    part(
        "born-slow",
        "an NVMe disk plugged in on day 2.5, 3x slower than its peers from its first run",
        born.added,
        born,
        Steady(0, 3.0),
        "DiskprobeSlowerThanPeers",
        by=born.added + 8 * H,
    )
    part(
        "cloud-steady",
        "an EBS gp3 volume 3x slower than the other gp3 volumes from day 3.5 on (gp2, gp3 and io2 report one model; operators name their cohorts)",
        3 * DAY + 12 * H,
        pick(GP3),
        Steady(3 * DAY + 12 * H, 3.0),
        "DiskprobeSlowerThanPeers",
        by=4 * DAY,
    )
    fallback = Drift(1 * DAY + 12 * H, 0.2)
    part(
        "small-cohort-drift",
        "a disk of a model with 3 disks in the fleet (under the cohort minimum of 5) 20% slower every day from day 1.5 on: compared with its own best day",
        fallback.onset,
        pick(RARE),
        fallback,
        "DiskprobeLatencyRegression",
        by=fallback.onset + 24 * H,
        silent=fallback.onset - round(math.log(2 / 1.5) / math.log(1.2) * DAY),
    )
    part(
        "step-2x",
        "an EBS io2 volume exactly 2x slower than the other io2 volumes from day 1.5 on (the boundary of the goal)",
        1 * DAY + 12 * H,
        pick(IO2),
        Steady(1 * DAY + 12 * H, 2.0),
        "DiskprobeSlowerThanPeers",
        by=1 * DAY + 12 * H + 24 * H,
    )
    part(
        "outlier-1.3x",
        "a healthy EBS gp2 volume 1.3x slower than the other gp2 volumes all week (a slower host of one volume type)",
        0,
        pick(GP2),
        Steady(0, 1.3),
    )
    part(
        "afternoon-1.5x",
        "a healthy NVMe disk 1.5x slower than its peers for one afternoon (12:00 to 18:00 on day 3)",
        3 * DAY + 12 * H,
        pick(NVME),
        Window(3 * DAY + 12 * H, 3 * DAY + 18 * H, 1.5),
    )
    busy = pick(SATA)
    part(
        "busy",
        "a healthy SATA SSD serving 6x its peers' workload from day 2 on (its diskstats say so), its p99 2.5x theirs accordingly",
        2 * DAY,
        busy,
        Busy(2 * DAY, 6.0),
    )
    part(
        "one-slow-run",
        "a healthy NVMe disk with one run at 90 ms on day 3",
        3 * DAY,
        pick(NVME),
        OneSlowRun(3 * DAY),
    )
    events = [
        CohortSlowdown(HDD, 2.5, nightly=True, hour=1, hours=2, load=3.0),
        CohortSlowdown(SATA, 3.0, start=5 * DAY + 12 * H, end=6 * DAY),
    ]
    # A disk that plays a part is, until its fault, the median of its peers (at their workloads),
    # so that "2x its peers" is 2x its own healthy self.
    for p in parts:
        d = p.disk
        peers = [x for n in nodes for x in n.disks if x.model is d.model and not x.faults]
        d.bias, d.workload = quantile(0.5, [x.bias * (1 + 0.3 * (x.workload / x.model.iops - 1)) for x in peers]), d.model.iops
    restart = rng.choice([n for n in nodes if n is not reboot])
    restart.restarts.append((2 * DAY + 5 * H, 2 * M))
    for k, n in enumerate(nodes):
        n.rollout = 3 * DAY + 12 * H + k * 3 * M
    return Fleet(
        nodes,
        parts,
        events,
        cohort_alerts=[(SATA, 5 * DAY + 20 * H, 6 * DAY)],
    )


def healthy_parts():
    """What happens to the healthy disks of every fleet: rows of the table (name, what happens,
    when, what fires)."""
    return [
        ("noise and a daily cycle", "every disk: runs ±30% apart, 3% of them 1.5-3x slower; a daily cycle of ±25% whose phase differs by node; workloads 0.5-2x their model's, latency 0.3x higher per 1x more", "", "none"),
        ("cohort backup window", "every HDD 2.5x slower (and 3x busier) from 01:00 to 03:00", "every night", "none"),
        ("cohort slowdown", "every SATA SSD 3x slower for 12 hours (a noisy neighbour on their backend)", "day 5.5", "DiskprobeCohortSlowdown (info) for their cohort: firing from day 5.83 (at the latest) to day 6; no disk is paged"),
        ("operator cohorts", "5 EBS gp2, 5 gp3 and 5 io2 volumes report one model; their p99s are 2.4, 1.1 and 0.5 ms: as one cohort every gp2 volume would be 2x its peers", "", "none"),
        ("agent restart", "the agent of one node is down for 2 minutes: counters from zero, no last run until its first cycle", "day 2.2", "none"),
        ("rollout", "every agent replaced by a new pod (3 minutes apart): the stored series change their `pod` label", "day 3.5", "none"),
        ("reboot", "the node of the steady disk reboots (down 4 minutes): its two NVMe disks swap kernel names, diskstats restart from zero", "day 4", "none"),
    ]


# ---------------------------------------------------------------------------------------------
# The agents' series.


def daily(t, phase, amplitude):
    return 1 + amplitude * math.sin(2 * math.pi * (t / DAY - phase))


class Exporter:
    """The series the agents of a fleet export, scraped every minute."""

    def __init__(self, fleet, seed):
        self.f, self.rng = fleet, random.Random(seed * 7919 + 1)
        self.n = fleet.duration // SCRAPE + 1
        self.tracks = defaultdict(Track)

    def put(self, name, labels, i, value, inc=0):
        if i >= self.n:
            return
        self.tracks[(name, tuple(sorted((k, str(v)) for k, v in labels.items() if v != "")))].set(i, value, inc)

    def end(self, keys, i):
        for key in keys:
            if key in self.tracks and i < self.n:
                self.tracks[key].set(i, None)

    def run(self):
        for node in self.f.nodes:
            self.node(node)
        # kube-state-metrics: the StorageClass of each PersistentVolume, all week.
        for d in self.f.disks():
            if d.pv:
                ksm = dict(job="kube-state-metrics", instance="kube-state-metrics:8080")
                self.put("kube_persistentvolume_info", dict(ksm, persistentvolume=d.pv, storageclass=d.model.storage_class), 0, 1)
        return self

    def sessions(self, node):
        """(start, end, pod, boot, down_after): the agent runs from start to end; then it is down
        (up is 0) for down_after seconds or, at a rollout, gone until its new pod starts."""
        events = sorted(
            [(t, d, "restart") for t, d in node.restarts]
            + [(t, d, "reboot") for t, d in node.reboots]
            + ([(node.rollout, 30, "rollout")] if node.rollout is not None else [])
        )
        out, start, pod, boot = [], 0, 0, 0
        for t, d, what in events:
            out.append((start, t, pod, boot, d if what != "rollout" else 0))
            start = t + d
            if what == "rollout":
                pod += 1
            if what == "reboot":
                boot += 1
        out.append((start, self.f.duration + SCRAPE, pod, boot, 0))
        if node.drained is not None:
            # Drained: gone from service discovery (no `up` either), for good.
            out = [(a, min(b, node.drained), p, bt, d if b <= node.drained else 0) for a, b, p, bt, d in out if a < node.drained]
        return out

    def node(self, node):
        rng = random.Random(self.rng.random())
        pods = [f"diskprobe-exporter-{rng.getrandbits(20):05x}" for _ in range(3)]
        disks = node.disks
        counters = {id(d): [0, 0, 0, 0] for d in disks}  # reads, writes, busy ms, queue ms since boot
        last_boot = 0
        for start, end, pod, boot, down in self.sessions(node):
            if boot != last_boot:
                last_boot = boot
                counters = {id(d): [0, 0, 0, 0] for d in disks}
            base = dict(job=JOB, instance=node.instance, pod=pods[pod])
            first, stop = math.ceil(start / SCRAPE), math.ceil(end / SCRAPE)
            keys = set()

            def put(name, labels, i, value, inc=0):
                labels = dict(base, **labels)
                self.put(name, labels, max(i, first), value, inc)
                keys.add((name, tuple(sorted((k, str(v)) for k, v in labels.items() if v != ""))))

            put("up", {}, first, 1)
            put("diskprobe_scrape_collector_success", dict(collector="diskstats"), first, 1)
            for disk in disks:
                if disk.added >= end:
                    continue
                kname = self.kname(node, disk, boot)
                self.disk(disk, kname, put, start, end, first, stop, counters[id(disk)])
            self.end(keys, stop)
            if down:
                self.put("up", base, stop, 0)
                self.end([("up", tuple(sorted(base.items())))], math.ceil((end + down) / SCRAPE))

    def kname(self, node, disk, boot):
        same = [d for d in node.disks if d.model.kind == disk.model.kind]
        k = same.index(disk)
        if boot % 2 == 1 and disk.model.kind == "nvme" and k < 2 and len(same) >= 2:
            k = 1 - k  # the reboot swaps the first two NVMe namespaces
        return f"nvme{k}n1" if disk.model.kind == "nvme" else "sd" + "abcdefgh"[k]

    def disk(self, disk, kname, put, start, end, first, stop, io):
        f, rng = self.f, self.rng
        t0 = max(start, disk.added)
        i0 = math.ceil(t0 / SCRAPE)
        model, node = disk.model, disk.node
        targets = disk.targets(kname)
        target = dict(target=disk.target)
        for name, kind, path in targets:
            info = dict(target=name, path=path, device=kname, kind=kind, rule="disks" if kind == "block_device" else "", cohort=model.cohort)
            put("diskprobe_target_info", info, i0, 1)
            put("diskprobe_target_interval_seconds", dict(target=name), i0, INTERVAL)
            if disk.also:
                put("diskprobe_target_disk_info", dict(target=name, device=kname, serial=disk.serial), i0, 1)
        dev = dict(device=kname)
        put("diskprobe_disk_info", dict(dev, model=model.name, serial=disk.serial, rotational=model.rotational), i0, 1)
        if f.full:
            # What the headroom rules read: the disk under the target, its declared limit and the
            # node's ceiling, and the byte counters and queue of diskstats.
            ident = dict(dev, serial=disk.serial)
            put("diskprobe_target_disk_info", dict(target, **ident), i0, 1)
            put("diskprobe_disk_limit_iops", dict(ident, source="config"), i0, 3 * model.iops)
            put("diskprobe_node_limit_device_info", ident, i0, 1)
            put("diskprobe_node_limit_iops", dict(source="config"), i0, 20 * NVME.iops)
            put("diskprobe_disk_io_now", dev, i0, 0)
        # Diskstats: reads and writes completed, at a rate constant within each hour.
        for h in range(int(t0 // H), math.ceil(end / H)):
            lo, hi = max(h * H, t0), min((h + 1) * H, end)
            i, j = math.ceil(lo / SCRAPE), math.ceil(hi / SCRAPE)
            if j <= i:
                continue
            rate = self.workload(disk, h * H + H // 2)
            reads, writes = round(0.7 * rate * SCRAPE), round(0.3 * rate * SCRAPE)
            # Busy time and queue (Little's law) at the disk's mean latency, in milliseconds.
            busy = min(SCRAPE * 1000, round(rate * disk.model.p99 / 2.5 * SCRAPE * 1000))
            queue = round(rate * disk.model.p99 / 2.5 * SCRAPE * 1000)
            put("diskprobe_disk_reads_completed_total", dev, i, io[0], reads)
            put("diskprobe_disk_writes_completed_total", dev, i, io[1], writes)
            put("diskprobe_disk_io_time_seconds_total", dev, i, io[2] / 1000, busy / 1000)
            put("diskprobe_disk_io_time_weighted_seconds_total", dev, i, io[3] / 1000, queue / 1000)
            if f.full:
                put("diskprobe_disk_read_bytes_total", dev, i, io[0] * 4096, reads * 4096)
                put("diskprobe_disk_written_bytes_total", dev, i, io[1] * 4096, writes * 4096)
            io[0] += reads * (j - i)
            io[1] += writes * (j - i)
            io[2] += busy * (j - i)
            io[3] += queue * (j - i)
        for name, profile in [(n, p) for n, _, _ in targets for p in f.profiles]:
            p = dict(target=name, profile=profile)
            settings = facts.get().profile(profile)  # a built-in: as the agent labels it
            rate = settings["rate_iops"]
            put("diskprobe_profile_info", dict(p, **settings), i0, 1)
            pd = dict(p, device=kname)
            put("diskprobe_probe_recent_runs", dict(pd, result="success"), i0, 0)
            put("diskprobe_probe_recent_runs", dict(pd, result="error"), i0, 0)
            put("diskprobe_probe_recent_runs", dict(pd, result="timeout"), i0, 0)
            put("diskprobe_probe_recent_io_error_runs", pd, i0, 0)
            if f.full:
                for result in ("error", "timeout", "skipped"):
                    put("diskprobe_probe_runs_total", dict(pd, result=result), i0, 0)
                put("diskprobe_io_errors_total", pd, i0, 0)
            runs, begin = 0, t0 + 3 + (rng.uniform(0, INTERVAL - 5) if start == 0 else 0)
            while begin + 1 < end:
                t = begin + 1
                i = math.ceil(t / SCRAPE)
                if i >= stop:
                    break
                runs += 1
                p99 = float(f"{self.latency(disk, t):.4g}")
                iops = float(f"{min(rate, 2.5 / p99):.4g}")
                put("diskprobe_probe_latency_seconds", dict(pd, stat="p99"), i, p99)
                if f.full:
                    put("diskprobe_probe_iops", pd, i, iops)
                    put("diskprobe_probe_throughput_bytes_per_second", pd, i, iops * settings["block_size"])
                put("diskprobe_probe_last_run_timestamp_seconds", pd, i, round(t, 3))
                if runs <= facts.get().recent_runs:
                    put("diskprobe_probe_recent_runs", dict(pd, result="success"), i, runs)
                if f.full:
                    put("diskprobe_probe_latency_seconds", dict(pd, stat="p50"), i, round(p99 / 2.5, 9))
                    put("diskprobe_probe_runs_total", dict(pd, result="success"), i, runs)
                    put("diskprobe_ios_total", pd, i, runs * rate)
                    put("diskprobe_io_bytes_total", pd, i, runs * rate * settings["block_size"])
                begin += INTERVAL * (1 + rng.uniform(-0.1, 0.1))

    def workload(self, disk, t):
        w = disk.workload * daily(t, disk.node.phase, 0.4)
        for fault in disk.faults:
            if isinstance(fault, Busy):
                w *= fault.load(t)
        for e in self.f.events:
            if e.model is disk.model and e.active(t):
                w *= e.load
        return w

    def latency(self, disk, t):
        rng = self.rng
        v = disk.model.p99 * disk.bias * rng.uniform(0.7, 1.3)
        if rng.random() < 0.03:
            v *= rng.uniform(1.5, 3.0)
        v *= daily(t, disk.node.phase, 0.25)
        load = disk.workload / disk.model.iops
        for fault in disk.faults:
            if isinstance(fault, Busy):
                load *= fault.load(t)
        v *= 1 + 0.3 * (load - 1)
        for e in self.f.events:
            if e.model is disk.model and e.active(t):
                v *= e.factor * rng.uniform(0.8, 1.2)
        for fault in disk.faults:
            v = fault.latency(v, t, rng)
        return v

    def input_series(self):
        return [
            dict(series=series_text(name, dict(labels)), values=track.encode(self.n))
            for (name, labels), track in sorted(self.tracks.items())
        ]


# ---------------------------------------------------------------------------------------------
# The checks.


def pair_labels(part):
    d = part.disk
    labels = dict(job=JOB, instance=d.node.instance, target=d.target, profile=PROFILE)
    if part.alert == "DiskprobeSlowerThanPeers":
        labels.update(d.model.key())
    return labels


def alerts_query(labels):
    return "ALERTS{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + ',alertstate="firing"}'


def checks(fleet, end, runbook=True):
    """promql_expr_test entries of a fleet suite (with the runbook queries of each alert that
    fires, unless not `runbook`)."""
    by = "alertname, severity, instance, target, profile, cohort, model, rotational"
    expected = []
    for part in fleet.parts:
        if part.alert:
            expected.append(dict(pair_labels(part), alertname=part.alert, severity=severity(part.alert)))
    for model, _, _ in fleet.cohort_alerts:
        expected.append(dict(model.key(), profile=PROFILE, alertname="DiskprobeCohortSlowdown", severity="info"))
    tests = [
        dict(
            expr=f'group by ({by}) (max_over_time(ALERTS{{alertstate="firing"}}[{end + EVAL}s]))',
            eval_time=f"{end}s",
            exp_samples=[dict(labels=labels_text({k: v for k, v in e.items() if k != "job"}), value=1) for e in expected],
        )
    ]
    for part in fleet.parts:
        if not part.alert:
            continue
        labels = dict(pair_labels(part), alertname=part.alert)
        # Named at every evaluation from its deadline to the end (the window's left edge between
        # evaluations: the same count on every engine).
        span = end - part.by
        tests.append(
            dict(
                expr=f"sum by (alertname, target) (count_over_time({alerts_query(labels)}[{edge_free(span, EVAL)}s]))",
                eval_time=f"{end}s",
                exp_samples=[dict(labels=labels_text(dict(alertname=part.alert, target=part.disk.target)), value=span // EVAL + 1)],
            )
        )
        # Not named before its onset (for a drift: before it was 1.5x as slow).
        if part.silent > EVAL:
            tests.append(
                dict(
                    expr=f'count_over_time(ALERTS{{target="{part.disk.target}",alertstate="firing"}}[{edge_free(part.silent - EVAL, EVAL)}s])',
                    eval_time=f"{part.silent - EVAL}s",
                    exp_samples=[],
                )
            )
        if runbook:
            tests += runbook_tests(part.alert, dict(labels, job=JOB), end)
    for model, lo, hi in fleet.cohort_alerts:
        labels = dict(model.key(), profile=PROFILE, alertname="DiskprobeCohortSlowdown")
        tests.append(
            dict(
                expr=f"sum by (alertname) (count_over_time({alerts_query(labels)}[{edge_free(hi - lo, EVAL)}s]))",
                eval_time=f"{hi}s",
                exp_samples=[dict(labels=labels_text(dict(alertname="DiskprobeCohortSlowdown")), value=(hi - lo) // EVAL + 1)],
            )
        )
        tests += runbook_tests("DiskprobeCohortSlowdown", dict(labels, job=JOB), hi)
    return tests


def fleet_group(seed):
    fleet = draw_fleet(seed)
    exporter = Exporter(fleet, seed).run()
    end = fleet.duration
    return dict(
        name=f"fleet seed {seed}",
        interval=f"{SCRAPE}s",
        input_series=exporter.input_series(),
        promql_expr_test=checks(fleet, end),
    )


# ---------------------------------------------------------------------------------------------
# What real fleets do to cohorts: one shrinks, one model has two tiers.


def small_fleet(seed, models):
    """One node per disk, for each (model, count) of `models`, drawn as draw_fleet draws."""
    rng = random.Random(seed)
    nodes = []
    for model, count in models:
        for _ in range(count):
            n = Node(f"node-{len(nodes) + 1:02d}", phase=0.6 + rng.uniform(-0.05, 0.05))
            new_disk(rng, n, model, slot=0)
            nodes.append(n)
    return nodes


def shrink_fleet(seed):
    """A cohort of exactly 5 SATA SSDs on 5 nodes for 3 days; on day 2 one node is drained (its
    agent and its disk leave the fleet: 4 remain, no longer a cohort); 10 hours later one of the
    4 becomes 4x slower. Its baseline was learned while it had peers."""
    nodes = small_fleet(seed, [(SATA, 5)])
    nodes[4].drained = 2 * DAY
    slow = nodes[1].disks[0]
    onset = 2 * DAY + 10 * H
    slow.faults.append(Steady(onset, 4.0))
    part = Part(
        "cohort-shrinks",
        "a cohort of exactly 5 SATA SSDs; one node is drained on day 2 (4 remain); 10 hours later one of them becomes 4x slower",
        onset,
        "DiskprobeLatencyRegression",
        by=onset + 6 * H,
        silent=onset,
        disk=slow,
    )
    return Fleet(nodes, [part], [], [], duration=3 * DAY)


GP3_PV = Model(EBS, "0", 1.1e-3, 150, "nvme", storage_class="gp3")
IO2_PV = Model(EBS, "0", 0.5e-3, 150, "nvme", storage_class="io2")


def tiers_fleet(seed):
    """Two tiers of one cloud model, of equal size: 5 EBS gp3 and 5 io2 PersistentVolumes (p99
    1.1 and 0.5 ms, one model to the guest) on 10 nodes, their cohorts from their StorageClass;
    from day 1.5 one io2 volume is 3x slower (1.5 ms: slower than its tier, faster than gp3). And
    4 SATA SSDs, one of them probed twice (its block device and a file on its filesystem): 5
    targets, 4 disks, no cohort."""
    nodes = small_fleet(seed, [(GP3_PV, 5), (IO2_PV, 5), (SATA, 4)])
    twice = nodes[-1].disks[0]
    twice.also.append(f"file-{twice.serial}")
    slow = nodes[6].disks[0]
    onset = DAY + 12 * H
    slow.faults.append(Steady(onset, 3.0))
    part = Part(
        "tiers",
        "5 gp3 and 5 io2 PersistentVolumes of one model, cohorts by StorageClass; one io2 volume 3x slower from day 1.5",
        onset,
        "DiskprobeSlowerThanPeers",
        by=onset + 12 * H,
        silent=onset,
        disk=slow,
    )
    return Fleet(nodes, [part], [], [], duration=3 * DAY)


def events_group(name, fleet, seed, extra=()):
    exporter = Exporter(fleet, seed).run()
    return dict(
        name=name,
        interval=f"{SCRAPE}s",
        input_series=exporter.input_series(),
        # The runbook queries are the main fleet's to check (some list the disks it holds back).
        promql_expr_test=checks(fleet, fleet.duration, runbook=False) + list(extra),
    )


def events_groups(seed):
    tiers = tiers_fleet(seed)
    sata = ",".join(f'{k}="{v}"' for k, v in SATA.key().items())
    end = f"{tiers.duration}s"
    # The disk probed twice counts once: 5 targets with a last run, 4 disks, no cohort median.
    counted_once = [
        dict(expr=f"count(diskprobe:probe_latency_p99:last_in_cohort{{{sata}}})", eval_time=end, exp_samples=[dict(labels="{}", value=5)]),
        dict(expr=f"count(diskprobe_cohort:probe_latency_p99:median{{{sata}}})", eval_time=end, exp_samples=[]),
        dict(expr='count by (cohort) (diskprobe_cohort:probe_latency_p99:median{cohort=~"gp3|io2"})', eval_time=end, exp_samples=[dict(labels=f'{{cohort="{c}"}}', value=1) for c in ("gp3", "io2")]),
    ]
    return [
        events_group(f"fleet events seed {seed}: a cohort shrinks", shrink_fleet(seed), seed),
        events_group(f"fleet events seed {seed}: two tiers of one model", tiers, seed, counted_once),
    ]


# ---------------------------------------------------------------------------------------------
# A small cohort without noise: the annotations, exactly.


# The exact fleet's fast-path disk: 20x slower for an hour from day 1 06:00; the cohort-wide
# slowdown of day 2 from 06:00: 3x.
FAST_FACTOR, FAST_START, FAST_END = 20.0, DAY + 6 * H, DAY + 7 * H
SHIFT = 3.0


def exact_fleet():
    """Six NVMe disks on three nodes, no noise, no cycle: one is 3x slower from its first run;
    another 20x slower for an hour on day 1 from 06:00; on day 2 from 06:00 every disk is 3x
    slower (a cohort-wide slowdown)."""
    nodes = [Node(f"node-{k}", phase=0) for k in (1, 2, 3)]
    rng = random.Random(0)
    for n in nodes:
        for _ in range(2):
            d = Disk(n, NVME, serial(rng, NVME), slot=len(n.disks), workload=NVME.iops)
            n.disks.append(d)
    slow = nodes[1].disks[0]
    slow.faults.append(Steady(0, 3.0))
    fast = nodes[2].disks[1]
    fast.faults.append(Window(FAST_START, FAST_END, FAST_FACTOR))
    part = Part("exact", "", 0, "DiskprobeSlowerThanPeers", by=5 * H, silent=0, disk=slow)
    fleet = Fleet(nodes, [part], [CohortSlowdown(NVME, SHIFT, start=DAY + 30 * H, end=3 * DAY)], cohort_alerts=[], duration=3 * DAY)
    return fleet, slow, fast


class ExactExporter(Exporter):
    def latency(self, disk, t):
        v = disk.model.p99
        for e in self.f.events:
            if e.model is disk.model and e.active(t):
                v *= e.factor
        for fault in disk.faults:
            v = fault.latency(v, t, self.rng)
        return v

    def workload(self, disk, t):
        return disk.workload


def exact_group():
    fleet, slow, fast = exact_fleet()
    exporter = ExactExporter(fleet, 0).run()
    p99 = NVME.p99
    key = dict(job=JOB, instance=slow.node.instance, target=slow.target, profile=PROFILE, model=NVME.name, rotational="0")
    # Gauges keep four significant digits, as the exporter model writes them.
    p99 = float(f"{p99:.4g}")
    # Every healthy disk is its cohort's median (ratio 1, MAD 0: the floor), the slow one 3x.
    score = 0.6745 * (3.0 - 1.0) / 0.01

    def peers(disk, cohort):
        return dict(
            exp_labels=dict(key, severity="warning"),
            exp_annotations=dict(
                summary=f"Disk slower than its peers: {slow.node.instance} {slow.target}",
                description=(
                    f"Over the last 12 hours the runs of profile {PROFILE} on {slow.target} (now nvme0n1) "
                    f"had a median p99 of {humanize_duration(disk)} against {humanize_duration(cohort)} for the disks of its cohort ({NVME.name}); "
                    "sample by sample its p99 was 3.00x its peers' median (1.6 or more fires), and at least 3.00x in a fifth of its samples (2 or more, and 1.6x the median, fires); "
                    f"its modified z-score in the cohort is {score:.1f} (typical sample) and {score:.1f} (slower fifth), against 2; "
                    f"the cohort has {len(fleet.disks())} members with a last run."
                ),
            ),
        )

    cohort = dict(
        exp_labels=dict(job=JOB, model=NVME.name, rotational="0", profile=PROFILE, severity="info"),
        exp_annotations=dict(
            summary=f"Disks of cohort {NVME.name} are slower together",
            description=(
                f"The median p99 of profile {PROFILE} over the cohort's disks has been {humanize_duration(SHIFT * p99)} "
                f"over the last 6 hours, {SHIFT:.2f}x its baseline (2 or more fire) of {humanize_duration(p99)}; "
                "each of its disks is compared with the others at the same moments, so none of them is paged for it."
            ),
        ),
    )
    # At both checkpoints every sample of the last 30 minutes is of the step: the disk's median
    # p99 is 20x the model's, its peers' median the model's.
    fkey = dict(job=JOB, instance=fast.node.instance, target=fast.target, profile=PROFILE, model=NVME.name, rotational="0")
    far = dict(
        exp_labels=dict(fkey, severity="warning"),
        exp_annotations=dict(
            summary=f"Disk far slower than its peers: {fast.node.instance} {fast.target}",
            description=(
                f"Over the last 30m the runs of profile {PROFILE} on {fast.target} (now nvme1n1) "
                f"had a median p99 of {humanize_duration(FAST_FACTOR * p99)} against {humanize_duration(p99)} for the disks of its cohort ({NVME.name}); "
                f"sample by sample its p99 was {FAST_FACTOR:.1f}x its peers' median (6 or more pages); "
                f"the cohort has {len(fleet.disks())} members with a last run."
            ),
        ),
    )
    tests = [
        dict(eval_time=f"{3 * H}s", alertname="DiskprobeSlowerThanPeers", exp_alerts=[]),
        dict(eval_time=f"{5 * H}s", alertname="DiskprobeSlowerThanPeers", exp_alerts=[peers(3 * p99, p99)]),
        dict(eval_time=f"{DAY + 30 * H + 2 * H}s", alertname="DiskprobeCohortSlowdown", exp_alerts=[]),
        dict(eval_time=f"{DAY + 30 * H + 10 * H}s", alertname="DiskprobeCohortSlowdown", exp_alerts=[cohort]),
        dict(eval_time=f"{DAY + 30 * H + 10 * H}s", alertname="DiskprobeSlowerThanPeers", exp_alerts=[peers(3 * SHIFT * p99, SHIFT * p99)]),
        # The fast path: silent before the step and through the whole cohort's 3x; named within
        # 30 minutes of the step and while it lasts; silent again 35 minutes after it ends.
        dict(eval_time=f"{FAST_START}s", alertname="DiskprobeFarSlowerThanPeers", exp_alerts=[]),
        dict(eval_time=f"{FAST_START + 30 * M}s", alertname="DiskprobeFarSlowerThanPeers", exp_alerts=[far]),
        dict(eval_time=f"{FAST_END}s", alertname="DiskprobeFarSlowerThanPeers", exp_alerts=[far]),
        dict(eval_time=f"{FAST_END + 35 * M}s", alertname="DiskprobeFarSlowerThanPeers", exp_alerts=[]),
        dict(eval_time=f"{DAY + 30 * H + 2 * H}s", alertname="DiskprobeFarSlowerThanPeers", exp_alerts=[]),
        dict(eval_time=f"{DAY + 30 * H + 10 * H}s", alertname="DiskprobeFarSlowerThanPeers", exp_alerts=[]),
        # The 12-hour path does not name an hour's step.
        dict(eval_time=f"{FAST_END + 4 * H}s", alertname="DiskprobeSlowerThanPeers", exp_alerts=[peers(3 * p99, p99)]),
    ]
    return dict(
        name="fleet exact annotations",
        interval=f"{SCRAPE}s",
        input_series=exporter.input_series(),
        alert_rule_test=tests,
    )


def suite(seed):
    groups = [exact_group()] if seed is None else [fleet_group(seed)] + events_groups(seed)
    return dict(
        rule_files=[RULES],
        evaluation_interval=f"{EVAL}s",
        group_eval_order=GROUP_ORDER,
        tests=groups,
    )


# ---------------------------------------------------------------------------------------------
# The table in docs/rules-design.md.


def day(t):
    return f"day {t / DAY:.3g}"


def rows():
    fleet = draw_fleet(1)
    out = []
    for part in fleet.parts:
        if part.alert:
            if part.silent == part.onset:
                silent = "silent until its onset"
            else:
                silent = f"silent until it is 1.5x as slow ({(part.onset - part.silent) / H:.0f} h before its onset)"
            fires = f"{part.alert}: {silent}, firing from +{(part.by - part.onset) / H:g} h (at the latest) to the end"
        else:
            fires = "none"
        out.append(f"| `fleet: {part.name}` | {part.says} | {day(part.onset)} | {fires} |")
    for name, says, when, fires in healthy_parts():
        out.append(f"| `fleet: {name}` | {says} | {when} | {fires} |")
    for f in (shrink_fleet(1), tiers_fleet(1)):
        for part in f.parts:
            out.append(
                f"| `fleet events: {part.name}` | {part.says} | {day(part.onset)} | "
                f"{part.alert}: silent until its onset, firing from +{(part.by - part.onset) / H:g} h (at the latest) to the end; no other disk named |"
            )
    return out


# ---------------------------------------------------------------------------------------------
# The bench fleet: OpenMetrics for `promtool tsdb create-blocks-from openmetrics`.


def bench_fleet(nodes=2):
    """`nodes` nodes with 8 disks and 2 gentle profiles each (5 NVMe and 3 SATA SSDs): every
    target-profile pair has a cohort of 5 or more. A week, no faults; the first node reboots twice,
    its NVMe kernel names swapping each time; every disk has a declared IOPS limit and every node
    a ceiling, so that the headroom rules read what they read on a real fleet."""
    rng = random.Random(42)
    out = []
    for k in range(nodes):
        n = Node(f"node-{k + 1:02d}", phase=0.6 + rng.uniform(-0.05, 0.05))
        for model in [NVME] * 5 + [SATA] * 3:
            d = Disk(n, model, serial(rng, model), slot=len(n.disks))
            d.bias = math.exp(rng.gauss(0, 0.06))
            d.workload = model.iops
            n.disks.append(d)
        out.append(n)
    for n in out:
        n.rollout = None
    # Two reboots of the first node, each swapping its first two NVMe kernel names (and back):
    # the series of the old names end without staleness markers, as backfilled history has none.
    out[0].reboots = [(2 * DAY + 3 * H, 120), (5 * DAY + 3 * H, 120)]
    return Fleet(out, [], [], [], profiles=(PROFILE, "randwrite-4k-qd1-gentle"), full=True)


def openmetrics(directory, nodes=2, base=0, days=7):
    """Writes the bench fleet as OpenMetrics, one file per day (day-NN.om), its week starting at
    `base` (Unix seconds); prints the number of target-profile pairs."""
    fleet = bench_fleet(nodes)
    fleet.duration = days * DAY
    exporter = Exporter(fleet, 1).run()
    n = exporter.n
    per_day = DAY // SCRAPE
    os.makedirs(directory, exist_ok=True)
    # Values per scrape, once per series.
    series = []
    for (name, labels), track in sorted(exporter.tracks.items()):
        values = [None] * n
        pieces = track.pieces + [(n, None, 0)]
        for (i, v, inc), (j, _, _) in zip(pieces, pieces[1:]):
            for k in range(i, min(j, n)):
                values[k] = None if v is None else v + inc * (k - i)
        series.append((name, labels_text(dict(labels)), values))
    for d in range(days):
        lo, hi = d * per_day, min((d + 1) * per_day, n)
        with open(os.path.join(directory, f"day-{d:02d}.om"), "w") as f:
            family = None
            for name, labels, values in series:
                kind = facts.get().kind(name)
                if name != family:
                    family = name
                    f.write(f"# TYPE {name[: -len('_total')] if kind == 'counter' else name} {kind}\n")
                for k in range(lo, hi):
                    v = values[k]
                    if v is not None:
                        f.write(f"{name}{labels} {fmt(v)} {base + k * SCRAPE}\n")
            f.write("# EOF\n")
    pairs = len({(dict(l)["instance"], dict(l)["target"], dict(l)["profile"]) for (nm, l) in exporter.tracks if nm == "diskprobe_profile_info"})
    print(pairs)
