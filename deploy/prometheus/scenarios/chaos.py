"""The rule-chaos suite of deploy/prometheus/rules.yml: a small healthy fleet, one fail-slow disk,
and the odd moments real fleets have, injected on chosen nodes; every rule group evaluated every
minute over 12 hours. promtool reports a rule that fails to evaluate at any evaluation ("many-to-
many matching not allowed", "found duplicate series for the match group", "vector contains
metrics with the same labelset") as a failure of the suite, so the suite passes only if no rule of
any group ever fails; its checks also require that the alerts stay right: the fail-slow disk is
named by DiskprobeSlowerThanPeers, and nothing else ever fires.

Eight nodes with two NVMe disks each (one cohort of 16), each disk probed by the gentle profile
every 5 minutes (a target per disk, named by serial, as discovery names them), its workload a
fifth of its declared IOPS limit, a node ceiling on every node, and a capacity target on each
node's `/dev/nvme1n1` (4k QD32, every 10 minutes), whose runs measure the disk's limit. What
happens, each on a node the seed draws:

- twice: the agent is scraped by two monitors (`endpoint` differs); a reload sets a `cohort` that
  one copy sees two scrapes before the other, and for an hour one copy reads another firmware
  `revision` of both disks.
- surge: a DaemonSet rollout with `maxSurge`: the new pod (with a new `cohort` key) runs three
  minutes beside the old one.
- reboot: the node reboots (two minutes down, its series marked stale) and its two NVMe kernel
  names swap; the capacity target now probes the other disk.
- reboot-unmarked: the same without staleness markers (a remote-write gap, federation, history
  backfilled): the old series end where they are, visible to the look-back window beside the new.
- replaced: a disk is replaced by one of another model under the same kernel name, its series
  ending without markers.
- gap: every series of the node ends without markers for 20 minutes (federation lost the node),
  then comes back from a new pod.
- silent: the node stops reporting for good (no markers, no `up`).
- slow: a disk 3x slower than its peers from its first run (the one alert that must fire).

    generate.py chaos SEED OUT.json      # then: promtool test rules OUT.json
"""

import random

import facts
from common import GROUP_ORDER, JOB, RULES, Track, edge_free, labels_text, series_text

SCRAPE = 60
EVAL = 60
H = 3600
M = 60
DURATION = 12 * H
INTERVAL = 300
CAPACITY_INTERVAL = 600
GENTLE = "randread-4k-qd1-gentle"
CAPACITY = "randread-4k-qd32"
NVME = ("SAMSUNG MZQL23T8HCLS-00A07", "GDC5602Q")
OTHER = ("Micron_7450_MTFDKCC1T9TFR", "E2MU200")
P99 = 200e-6
WORKLOAD = 600  # I/Os per second of each disk's workload
IOPS_LIMIT = 3000
NODE_IOPS_LIMIT = 6000
CAPACITY_IOPS = 2990  # what a capacity run measures (at the limit)
PARTS = ["twice", "surge", "reboot", "reboot-unmarked", "replaced", "gap", "silent", "slow"]


class Series:
    """Every series of the suite on the scrape grid."""

    def __init__(self):
        self.n = DURATION // SCRAPE + 1
        self.tracks = {}

    def key(self, name, labels):
        return (name, tuple(sorted((k, str(v)) for k, v in labels.items() if v != "")))

    def put(self, name, labels, i, value, inc=0):
        if 0 <= i < self.n:
            self.tracks.setdefault(self.key(name, labels), Track()).set(i, value, inc)

    def end(self, key, i, marked):
        """The series ends at scrape i: with a staleness marker, or (unmarked) only absent from
        the next scrape on, where its last sample stays visible for the look-back window."""
        if key in self.tracks and i < self.n:
            track = self.tracks[key]
            track.set(i, None)
            if not marked:
                track.unmarked = True

    def input_series(self):
        out = []
        for (name, labels), track in sorted(self.tracks.items()):
            values = track.encode(self.n)
            if getattr(track, "unmarked", False):
                values = values.replace("stale", "_")
            out.append(dict(series=series_text(name, dict(labels)), values=values))
        return out


class Disk:
    def __init__(self, serial, model):
        self.serial, self.model = serial, model
        self.slow = 1.0

    @property
    def target(self):
        return f"disk-{self.serial}"

    @property
    def wwn(self):
        return f"eui.{self.serial.lower()}"


class Session:
    """An agent's pod exporting from `start` to `end` (seconds) with the disks at their kernel
    names (`disks`: kernel name -> Disk), as `copies` (extra labels of each scrape of it)."""

    def __init__(self, start, end, pod, disks, marked=True, copies=None, cohort=None, revision=None, down=0):
        self.start, self.end, self.pod, self.disks = start, end, pod, disks
        self.marked, self.down = marked, down
        self.copies = copies or [{}]
        self.cohort = cohort or (lambda copy, t: "")  # the cohort key a copy sees at t
        self.revision = revision or (lambda copy, t, disk: disk.model[1])


def runs(put, i, pd, start, phase, interval, iops, p99, block_size):
    """At scrape i, the series of a profile run every `interval` from `phase` seconds after its
    agent started at `start`, each run reading `iops` of `block_size` bytes at `p99`."""
    n = max(0, int((i * SCRAPE - start - phase) // interval) + 1)
    for result in ("error", "timeout"):
        put("diskprobe_probe_recent_runs", dict(pd, result=result), i, 0)
    put("diskprobe_probe_recent_io_error_runs", pd, i, 0)
    put("diskprobe_probe_recent_runs", dict(pd, result="success"), i, min(n, facts.get().recent_runs))
    put("diskprobe_probe_runs_total", dict(pd, result="success"), i, n)
    put("diskprobe_ios_total", pd, i, n * iops)
    put("diskprobe_io_bytes_total", pd, i, n * iops * block_size)
    if n:
        put("diskprobe_probe_latency_seconds", dict(pd, stat="p99"), i, float(f"{p99:.4g}"))
        put("diskprobe_probe_iops", pd, i, iops)
        put("diskprobe_probe_throughput_bytes_per_second", pd, i, iops * block_size)
        put("diskprobe_probe_last_run_timestamp_seconds", pd, i, round(start + phase + (n - 1) * interval, 3))


def emit(series, instance, s, rng):
    first, stop = -(-s.start // SCRAPE), -(-s.end // SCRAPE)
    keys = set()
    phase = {d.target: rng.uniform(0, INTERVAL - 10) for d in s.disks.values()}
    cap_phase = rng.uniform(0, CAPACITY_INTERVAL - 10)
    for copy in s.copies:
        base = dict(job=JOB, instance=instance, pod=s.pod, **copy)

        def put(name, labels, i, value, inc=0):
            labels = dict(base, **labels)
            series.put(name, labels, i, value, inc)
            keys.add(series.key(name, labels))

        for i in range(first, stop):
            t = i * SCRAPE
            put("up", {}, i, 1)
            put("diskprobe_scrape_collector_success", dict(collector="diskstats"), i, 1)
            put("diskprobe_node_limit_iops", dict(source="config"), i, NODE_IOPS_LIMIT)
            for kname, disk in s.disks.items():
                dev = dict(device=kname)
                ident = dict(dev, serial=disk.serial, wwn=disk.wwn)
                since = t - s.start
                put("diskprobe_disk_info", dict(ident, model=disk.model[0], revision=s.revision(str(copy), t, disk), rotational="0", parent=""), i, 1)
                put("diskprobe_disk_reads_completed_total", dev, i, round(0.7 * WORKLOAD * since))
                put("diskprobe_disk_writes_completed_total", dev, i, round(0.3 * WORKLOAD * since))
                put("diskprobe_disk_read_bytes_total", dev, i, round(0.7 * WORKLOAD * since) * 4096)
                put("diskprobe_disk_written_bytes_total", dev, i, round(0.3 * WORKLOAD * since) * 4096)
                put("diskprobe_disk_io_now", dev, i, 0)
                put("diskprobe_disk_io_time_weighted_seconds_total", dev, i, round(WORKLOAD * P99 * since, 3))
                put("diskprobe_disk_limit_iops", dict(ident, source="config"), i, IOPS_LIMIT)
                put("diskprobe_node_limit_device_info", ident, i, 1)
                target = dict(target=disk.target)
                put("diskprobe_target_info", dict(target, path=f"/dev/{kname}", device=kname, parent="", kind="block_device", fstype="", cache="", rule="disks", cohort=s.cohort(str(copy), t)), i, 1)
                put("diskprobe_target_interval_seconds", target, i, INTERVAL)
                put("diskprobe_target_disk_info", dict(target, **ident), i, 1)
                pair = dict(target, profile=GENTLE)
                gentle = facts.get().profile(GENTLE)  # a built-in: as the agent labels it
                put("diskprobe_profile_info", dict(pair, **gentle), i, 1)
                runs(put, i, dict(pair, device=kname), s.start, phase[disk.target], INTERVAL, gentle["rate_iops"], P99 * disk.slow, gentle["block_size"])
            # The capacity target on /dev/nvme1n1: whatever disk has that name now.
            if "nvme1n1" in s.disks:
                disk = s.disks["nvme1n1"]
                target = dict(target="capacity")
                put("diskprobe_target_info", dict(target, path="/dev/nvme1n1", device="nvme1n1", parent="", kind="block_device", fstype="", cache="", rule="", cohort=""), i, 1)
                put("diskprobe_target_interval_seconds", target, i, CAPACITY_INTERVAL)
                put("diskprobe_target_disk_info", dict(target, device="nvme1n1", serial=disk.serial, wwn=disk.wwn), i, 1)
                pair = dict(target, profile=CAPACITY)
                put("diskprobe_profile_info", dict(pair, **facts.get().profile(CAPACITY)), i, 1)
                runs(put, i, dict(pair, device="nvme1n1"), s.start, cap_phase, CAPACITY_INTERVAL, CAPACITY_IOPS, 0.004, facts.get().profile(CAPACITY)["block_size"])
    for key in keys:
        series.end(key, stop, s.marked)
    if s.down:
        for copy in s.copies:
            labels = dict(job=JOB, instance=instance, pod=s.pod, **copy)
            series.put("up", labels, stop, 0)
            series.end(series.key("up", labels), -(-(s.end + s.down) // SCRAPE), True)


def serial(rng):
    return "S" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(13))


def draw(seed):
    """The fleet's nodes, each with its sessions, and the part each node plays."""
    rng = random.Random(seed)
    parts = PARTS[:]
    rng.shuffle(parts)
    nodes = []
    for k, part in enumerate(parts, 1):
        instance = f"node-{k}:9957"
        a, b = Disk(serial(rng), NVME), Disk(serial(rng), NVME)
        pods = [f"diskprobe-exporter-{rng.getrandbits(20):05x}" for _ in range(2)]
        at = rng.randrange(2 * H, 6 * H, SCRAPE)  # when it happens
        end = DURATION + SCRAPE
        normal = {"nvme0n1": a, "nvme1n1": b}
        swapped = {"nvme0n1": b, "nvme1n1": a}
        if part == "twice":
            cohorts = {str(dict(endpoint="web")): at, str(dict(endpoint="metrics")): at + 2 * M}
            sessions = [Session(
                0, end, pods[0], normal,
                copies=[dict(endpoint="web"), dict(endpoint="metrics")],
                cohort=lambda copy, t, c=cohorts: "nvme-fast" if t >= c[copy] else "",
                revision=lambda copy, t, disk, at=at: "GDC5702Q" if "web" in copy and at + H <= t < at + 2 * H else disk.model[1],
            )]
        elif part == "surge":
            sessions = [
                Session(0, at + 3 * M, pods[0], normal),
                Session(at, end, pods[1], normal, cohort=lambda copy, t: "nvme-fast"),
            ]
        elif part == "reboot":
            sessions = [Session(0, at, pods[0], normal, down=2 * M), Session(at + 2 * M, end, pods[0], swapped)]
        elif part == "reboot-unmarked":
            sessions = [Session(0, at, pods[0], normal, marked=False), Session(at + M, end, pods[0], swapped, marked=False)]
        elif part == "replaced":
            c = Disk(serial(rng), OTHER)
            sessions = [Session(0, at, pods[0], normal, marked=False), Session(at, end, pods[0], {"nvme0n1": a, "nvme1n1": c}, marked=False)]
        elif part == "gap":
            sessions = [Session(0, at, pods[0], normal, marked=False), Session(at + 20 * M, end, pods[1], normal, marked=False)]
        elif part == "silent":
            sessions = [Session(0, at, pods[0], normal, marked=False)]
        else:  # slow
            a.slow = 3.0
            sessions = [Session(0, end, pods[0], normal)]
        nodes.append((instance, part, sessions, a))
    return nodes


def volume_cohort():
    """A target on a device-mapper volume over two disks of one model has that model's cohort:
    the cohort, like the device lock, the contention watch and the limits, goes by the disks the
    target's I/O lands on (diskprobe_target_disk_info), not by the volume's own disk_info, which
    has no model. A partition's target has its disk's."""
    base = dict(job=JOB, instance="node-1:9957")
    series = []

    def put(name, labels):
        series.append(dict(series=series_text(name, dict(base, **labels)), values="1x30"))

    put("diskprobe_target_info", dict(target="vol", path="/dev/dm-0", device="dm-0", kind="block_device", cohort=""))
    put("diskprobe_target_info", dict(target="part", path="/dev/sdc1", device="sdc1", parent="sdc", kind="block_device", cohort=""))
    for disk in ("sda", "sdb"):
        put("diskprobe_target_disk_info", dict(target="vol", device=disk, serial=f"S-{disk}"))
        put("diskprobe_disk_info", dict(device=disk, model=NVME[0], serial=f"S-{disk}", rotational="0"))
    put("diskprobe_target_disk_info", dict(target="part", device="sdc", serial="S-sdc"))
    put("diskprobe_disk_info", dict(device="sdc", model=OTHER[0], serial="S-sdc", rotational="0"))
    put("diskprobe_disk_info", dict(device="sdc1", model=OTHER[0], serial="S-sdc", rotational="0", parent="sdc"))
    put("diskprobe_disk_info", dict(device="dm-0", rotational="0"))
    return dict(
        name="cohort of a volume over two disks",
        interval=f"{SCRAPE}s",
        input_series=series,
        promql_expr_test=[
            dict(
                expr="diskprobe:target_cohort:info",
                eval_time=f"{10 * M}s",
                exp_samples=[
                    dict(labels="diskprobe:target_cohort:info" + labels_text(dict(base, target="part", model=OTHER[0], rotational="0")), value=1),
                    dict(labels="diskprobe:target_cohort:info" + labels_text(dict(base, target="vol", model=NVME[0], rotational="0")), value=1),
                ],
            )
        ],
    )


def suite(seed):
    rng = random.Random(seed * 104729 + 7)
    series = Series()
    nodes = draw(seed)
    for instance, _, sessions, _ in nodes:
        for s in sessions:
            emit(series, instance, s, rng)
    (instance, _, _, slow), = [(i, p, s, a) for i, p, s, a in nodes if p == "slow"]
    named = dict(alertname="DiskprobeSlowerThanPeers", instance=instance, target=slow.target, profile=GENTLE, model=NVME[0], rotational="0", severity="warning")
    by = "alertname, severity, instance, target, profile, cohort, model, rotational, device"
    tests = [
        # What ever fired: the fail-slow disk, by the alert that names it, and nothing else.
        dict(
            expr=f'group by ({by}) (max_over_time(ALERTS{{alertstate="firing"}}[{edge_free(DURATION, EVAL)}s]))',
            eval_time=f"{DURATION}s",
            exp_samples=[dict(labels=labels_text(named), value=1)],
        ),
        # It is still named at the end.
        dict(
            expr=f'count(ALERTS{{alertname="DiskprobeSlowerThanPeers",target="{slow.target}",alertstate="firing"}})',
            eval_time=f"{DURATION}s",
            exp_samples=[dict(labels="{}", value=1)],
        ),
    ]
    # Every rule group evaluates up to the end (promtool evaluates as far as the last check).
    alert_tests = [dict(eval_time=f"{DURATION}s", alertname="DiskprobeProbeFailing", exp_alerts=[])]
    return dict(
        rule_files=[RULES],
        evaluation_interval=f"{EVAL}s",
        group_eval_order=GROUP_ORDER,
        tests=[
            volume_cohort(),
            dict(
                name=f"chaos seed {seed}: " + ", ".join(f"{i.split(':')[0]} {p}" for i, p, _, _ in nodes),
                interval=f"{SCRAPE}s",
                input_series=series.input_series(),
                promql_expr_test=tests,
                alert_rule_test=alert_tests,
            )
        ],
    )
