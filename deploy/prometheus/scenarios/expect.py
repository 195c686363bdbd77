"""What the one-target scenarios expect, and the scenarios' registry: `Scenario` (agents, what
happens to them, which alerts fire and from when), `Fires` (an alert that fires, with the labels
and annotations the rules give it, computed from the model's samples as the engine computes
them), and `Recordings` (the recording rules of a target without a cohort, as promtool evaluates
them, for the values in expected annotations).

A scenario is one function decorated with `@scenario` that returns a `Scenario`: the decorator
adds it to the suite and to the table of docs/rules-design.md, in the order the functions are
defined (one_target.py, then headroom.py; `SCENARIO_MODULES` lists the modules). Each one states,
for every alert of `ALERTS`, whether it fires and from when; the suite checks every alert at
every checkpoint. Standard library only.
"""

import importlib
from dataclasses import dataclass, field
from functools import lru_cache

import facts
from common import (
    JOB,
    humanize,
    humanize1024,
    humanize_duration,
    humanize_timestamp,
    keep_firing_for,
    prom_rate,
    quantile,
    range_points,
    runbook_tests,
    severity,
)
from model import DAY, EVAL, SCRAPE, H, M, Agent, Profile, Simulation, Target

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
                description=f"The p99 sync latency of profile {p.name} has been above 10 ms in each of its last {facts.get().recent_sync_runs} runs (at least {humanize_duration(v)}); etcd and other write-ahead logs wait for it on every commit.",
            )
        elif a == "DiskprobeProbeFailing":
            failed = sum(sim.at(ts, "diskprobe_probe_recent_runs", result=r, **probe) for r in ("error", "timeout"))
            ann = dict(
                summary=f"Disk probe failing on {inst} {t.name}",
                description=f"{failed} of the last {facts.get().recent_runs} runs of profile {p.name} on {t.name} failed or timed out (3 or more fire); the agent's log says why.",
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
                description=f"Probe I/Os of profile {p.name} on {t.name}{disk} failed in {v} of its last {facts.get().recent_runs} runs (2 or more page; it keeps firing for 1h after).",
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
# Times the scenarios share, and the registry.

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


# The modules whose `@scenario` functions make the one-target suite, in its order.
SCENARIO_MODULES = ("one_target", "headroom")

_REGISTRY = []


def scenario(build):
    """Adds `build` (a function that returns a `Scenario`) to the one-target suite."""
    _REGISTRY.append(build)
    return build


def cost(s):
    """What a scenario costs a rule-test tool, roughly: its samples (scrapes times the
    target-profile pairs of every scrape of every agent)."""
    pairs = sum(len(a.copies) * sum(len(t.profiles) for t in a.targets) for a in s.agents)
    return s.duration // SCRAPE * pairs


def quick(built):
    """The scenarios of `built` that the quick suite keeps: for each alert (in `ALERTS` order)
    that fires in one of them and in none kept so far, the cheapest in which it fires. Every
    alert that the whole suite fires fires in the quick one, at a fraction of its cost."""
    kept = []
    for alert in ALERTS:
        firing = [s for s in built if any(f.alert == alert for f in s.fires)]
        if firing and not any(s in kept for s in firing):
            kept.append(min(firing, key=cost))
    return [s for s in built if s in kept]


def scenarios(only=None, quick_only=False):
    """The one-target scenarios, built: those named in `only`, when given; with `quick_only`,
    those `quick` keeps."""
    for module in SCENARIO_MODULES:
        importlib.import_module(module)
    built = [build() for build in _REGISTRY]
    names = [s.name for s in built]
    if len(set(names)) != len(names):
        raise ValueError(f"two scenarios of one name: {sorted(n for n in names if names.count(n) > 1)}")
    if only:
        unknown = set(only) - set(names)
        if unknown:
            raise ValueError(f"no scenario named {', '.join(sorted(unknown))}")
        built = [s for s in built if s.name in only]
    if quick_only:
        built = quick(built)
    return built
