"""The one-target scenarios of the suite that generate.py writes: one agent or two, 30-second
scrapes, up to 28 hours; every alert is checked at every checkpoint (expect.py).

Each scenario is one function decorated with `@scenario` that returns a `Scenario`: its name, what
happens (said in words for docs/rules-design.md's table), the agents and their targets, the
effects on their runs, and the alerts that must fire (`Fires`: silent before `not_before`, firing
from `by`, until `until`); every other alert must stay silent throughout. To add one, write such a
function here (or in a module of `expect.SCENARIO_MODULES`); `generate.py table --write` puts it in
the table, and the `rules` test binary runs it on every engine. Times are seconds since the start
of the series. Standard library only.
"""

import facts
from expect import ONSET, Fires, Scenario, ends, scenario
from model import (
    SCRAPE,
    H,
    M,
    Agent,
    Failing,
    Hung,
    IOErrors,
    IOErrorsEvery,
    Noise,
    OneSlowRun,
    Queue,
    Skipped,
    Slower,
    SlowSyncs,
    Target,
    Vanished,
    etcd_wal,
    gentle,
    hdd_qd1,
    nvme_1m,
    nvme_qd1,
    nvme_qd32,
)



def nvme(instance="node-1:9957", **kw):
    return Agent(instance, [Target("data", "nvme0n1", [nvme_qd1()], **kw)])


def hdd(instance="node-2:9957", **kw):
    return Agent(instance, [Target("archive", "sda", [hdd_qd1()], kind="block_device", fstype="", **kw)])


@scenario
def healthy_nvme_and_hdd():
    a = nvme()
    b = hdd()
    return Scenario(
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


@scenario
def noise_40():
    a = nvme()
    b = hdd()
    return Scenario(
        "noise-40",
        "run-to-run noise of +-40% on NVMe and HDD latency and IOPS",
        [a, b],
        28 * H,
        effects=[Noise(0.4)],
        focus=ONSET,
        onset=ONSET,
        seed=2,
    )


@scenario
def one_slow_run():
    a = nvme()
    b = hdd()
    return Scenario(
        "one-slow-run",
        "one run in which 7% of I/Os took 90 ms (p99 90 ms), at 26 h, on NVMe and HDD",
        [a, b],
        28 * H,
        effects=[Noise(0.2), OneSlowRun(start=ONSET)],
        focus=ONSET,
        onset=ONSET,
        seed=3,
    )


@scenario
def nvme_x4():
    a = nvme()
    return Scenario(
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


@scenario
def hourly_x4():
    a = nvme(interval=3600)
    return Scenario(
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


@scenario
def hdd_x4():
    b = hdd()
    return Scenario(
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


@scenario
def new_target():
    a = Agent(
        "node-1:9957",
        [
            Target("data", "nvme0n1", [nvme_qd1()]),
            Target("fresh", "nvme1n1", [nvme_qd1()], start=24 * H),
        ],
    )
    return Scenario(
        "new-target",
        "a target added at 24 h (no baseline yet) whose p99 goes x10 at 26 h",
        [a],
        28 * H,
        effects=[Noise(0.2), Slower(10, start=ONSET, target="fresh")],
        focus=ONSET,
        onset=ONSET,
        seed=6,
    )


@scenario
def agent_restart():
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1(), nvme_qd32()])],
        down=[(ONSET, ONSET + 2 * M)],
    )
    return Scenario(
        "agent-restart",
        "the agent is down for 2 min at 26 h and restarts: counters from zero, no last run until its first cycle",
        [a],
        28 * H,
        effects=[Noise(0.2)],
        focus=ONSET - H,
        onset=ONSET,
        seed=7,
    )


@scenario
def rate_capped():
    a = Agent("node-1:9957", [Target("cloud", "sdb", [gentle()], kind="block_device", fstype="")])
    t = a.targets[0]
    return Scenario(
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


@scenario
def iops_drop():
    a = Agent("node-1:9957", [Target("data", "nvme0n1", [nvme_qd1(), nvme_qd32(), nvme_1m()])])
    t = a.targets[0]
    return Scenario(
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


@scenario
def throughput_drop():
    a = Agent("node-1:9957", [Target("data", "nvme0n1", [nvme_qd1(), nvme_qd32(), nvme_1m()])])
    t = a.targets[0]
    return Scenario(
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


@scenario
def etcd_slow_syncs():
    a = Agent("node-3:9957", [Target("etcd", "nvme0n1", [etcd_wal(4e-3)], path="/var/lib/etcd/diskprobe.dat")])
    t = a.targets[0]
    return Scenario(
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


@scenario
def etcd_slow_syncs_hourly():
    a = Agent("node-3:9957", [Target("etcd", "nvme0n1", [etcd_wal(4e-3)], path="/var/lib/etcd/diskprobe.dat", interval=H)])
    t = a.targets[0]
    return Scenario(
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


@scenario
def etcd_sync_spikes():
    a = Agent("node-3:9957", [Target("etcd", "nvme0n1", [etcd_wal(4e-3)], path="/var/lib/etcd/diskprobe.dat")])
    return Scenario(
        "etcd-sync-spikes",
        "every other run of the etcd-wal profile from 2 h on has an fdatasync p99 of 40 ms (4 ms otherwise): never 3 runs in a row",
        [a],
        4 * H,
        effects=[Noise(0.2), SlowSyncs(2, 40e-3, start=2 * H)],
        focus=H,
        onset=2 * H,
        seed=20,
    )


@scenario
def half_failing():
    a = nvme()
    t = a.targets[0]
    return Scenario(
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


@scenario
def failing_hourly():
    a = nvme(interval=H)
    t = a.targets[0]
    return Scenario(
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


@scenario
def every_minute():
    a = Agent(
        "node-1:9957",
        [
            Target("data", "nvme0n1", [nvme_qd1()], interval=M),
            Target("flaky", "nvme1n1", [nvme_qd1()], interval=M),
            Target("busy", "sda", [hdd_qd1()], interval=M),
        ],
    )
    flaky, busy = a.targets[1], a.targets[2]
    return Scenario(
        "every-minute",
        f"probed every minute, from 1 h on: every fifth run of data fails (2 of the last {facts.get().recent_runs} runs, never 3), every other run of flaky fails, no run of busy finishes",
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


@scenario
def io_errors():
    a = nvme()
    t = a.targets[0]
    return Scenario(
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


@scenario
def vanished_target():
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1()]), Target("other", "nvme1n1", [nvme_qd1()])],
    )
    t = a.targets[0]
    return Scenario(
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


@scenario
def vanished_restarts():
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
    return Scenario(
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


@scenario
def vanished_retired():
    a = Agent(
        "node-1:9957",
        [
            Target("data", "nvme0n1", [nvme_qd1()], kind="block_device", fstype="", path="/dev/disk/by-id/nvme-data", retired=3 * H + SCRAPE),
            Target("other", "nvme1n1", [nvme_qd1()]),
        ],
    )
    t = a.targets[0]
    return Scenario(
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


@scenario
def disk_retired():
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
    return Scenario(
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


@scenario
def disk_lost():
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
    return Scenario(
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


@scenario
def moved_volume():
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
    return Scenario(
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


@scenario
def hung_device():
    a = nvme()
    t = a.targets[0]
    hung = Hung(start=2 * H, target="data")
    return Scenario(
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


@scenario
def intermittent_io_errors():
    a = nvme()
    t = a.targets[0]
    return Scenario(
        "intermittent-io-errors",
        f"from 2 h every sixth run has failed I/Os: 1 or 2 of the last {facts.get().recent_runs} runs, coming and going; one page, held through the dips",
        [a],
        10 * H,
        effects=[Noise(0.2), IOErrorsEvery(6, 2, start=2 * H)],
        fires=[Fires("DiskprobeIOErrors", a, t, t.profiles[0], not_before=2 * H + 1, by=3 * H + 20 * M)],
        focus=H,
        onset=2 * H,
        seed=28,
    )


@scenario
def diskstats_fails():
    a = Agent("node-1:9957", [Target("data", "nvme0n1", [nvme_qd1()], interval=M)], diskstats_fails=H)
    t = a.targets[0]
    return Scenario(
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


@scenario
def duplicate_scrape():
    twice = [dict(service="diskprobe-exporter"), {}]
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1()]), Target("busy", "sdc", [hdd_qd1()])],
        copies=twice,
    )
    t, busy = a.targets
    return Scenario(
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


@scenario
def stale():
    a = nvme()
    t = a.targets[0]
    return Scenario(
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


@scenario
def stale_hourly():
    a = nvme(interval=H)
    t = a.targets[0]
    return Scenario(
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


@scenario
def never_ran():
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1()]), Target("hung", "sdd", [hdd_qd1()])],
    )
    t = a.targets[1]
    return Scenario(
        "never-ran",
        "target hung never finishes a run (its open hangs: every cycle is skipped)",
        [a],
        2 * H,
        effects=[Noise(0.2), Skipped(target="hung")],
        fires=[Fires("DiskprobeProbeAbsent", a, t, not_before=29 * M, by=35 * M)],
        focus=20 * M,
        seed=16,
    )


@scenario
def exporter_down():
    a = nvme()
    down = Agent(a.instance, a.targets, down=[(H, H + 30 * M)])
    return Scenario(
        "exporter-down",
        "the agent stops answering at 1 h for 30 min, then comes back",
        [down],
        2 * H,
        effects=[Noise(0.2)],
        fires=[Fires("DiskprobeExporterDown", down, not_before=H + M, by=H + 5 * M, until=H + 30 * M)],
        focus=50 * M,
        onset=H,
        seed=17,
    )


@scenario
def saturated():
    a = Agent(
        "node-1:9957",
        [Target("data", "nvme0n1", [nvme_qd1()]), Target("spin", "sda", [hdd_qd1()])],
    )
    return Scenario(
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
