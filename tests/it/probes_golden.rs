//! Golden outputs of the probe series (`diskprobe_probe_*`, `diskprobe_io_*`, the sync series,
//! the latency histograms' classic and native buckets) for fixed runs, in each classic bucket layout and
//! each format: the store is filled through the library with runs whose latencies are fixed, so
//! that every value is reproducible. Regenerate with `UPDATE_GOLDEN=1 cargo test --test it
//! probes_golden::` and review the diff; `promtool check metrics` must accept the text outputs.

use crate::common;

use common::{check_golden, decode_protobuf, promtool_check_metrics, protobuf_dump};
use diskprobe_exporter::blockdev::BlockDevice;
use diskprobe_exporter::collectors::Collector;
use diskprobe_exporter::collectors::probe_metrics::ProbesCollector;
use diskprobe_exporter::config::Config;
use diskprobe_exporter::exposition::{self, Family, Format};
use diskprobe_exporter::histogram::ClassicBuckets;
use diskprobe_exporter::probe::io_target::{Cache, TargetKind};
use diskprobe_exporter::probe::measurement::{CpuWait, Ending, EngineKind, ErrorReason};
use diskprobe_exporter::probe::measurement::{Measurement, Syncs, new_latency_histogram};
use diskprobe_exporter::run_context::{DeviceTime, RunContext};
use diskprobe_exporter::series::{RunCost, RunOutcome, SeriesStore, TargetInfo};

/// A whole disk named `kname`, as a stat of a target on it finds it.
fn device(kname: &str) -> BlockDevice {
    BlockDevice {
        kname: kname.to_owned(),
        disks: vec![kname.to_owned()],
        ..BlockDevice::default()
    }
}
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Three targets: one in a cohort with two runs of QD1 reads (latencies spread over three
/// doublings, one slow I/O), a QD32 run that failed to open and one with failed I/Os, one that
/// never ran (empty histograms), and one with three runs of etcd-wal (writes and their syncs,
/// recorded apart; each run's syncs 100 µs slower than the one before, so that the least of the
/// last three is the first run's).
fn families(layout: &ClassicBuckets) -> Vec<Family> {
    let config = Config::from_toml(
        "[[targets]]\nname = \"nvme\"\npath = \"/dev/nvme0n1\"\nprofiles = [\"randread-4k-qd1\", \"randread-4k-qd32\"]\ncohort = \"nvme-local\"\n\
         [[targets]]\nname = \"idle\"\npath = \"/srv/probe.dat\"\nprofiles = [\"randread-4k-qd1\"]\n\
         [[targets]]\nname = \"etcd\"\npath = \"/var/lib/etcd/probe.dat\"\nallow_writes = true\n\
         profiles = [\"etcd-wal\"]\n",
        Path::new("golden.toml"),
    )
    .unwrap();
    let specs: Vec<_> = config.targets.into_iter().map(Arc::new).collect();
    let store = Arc::new(SeriesStore::new());
    store.set_histogram_layout(layout);
    store.set_targets(&specs);
    store.set_info(
        &specs[0],
        TargetInfo {
            path: "/dev/nvme0n1".into(),
            device: Some(device("nvme0n1")),
            kind: Some(TargetKind::BlockDevice),
            ..TargetInfo::default()
        },
    );
    // The scheduler labels every target before its series are exported.
    store.set_info(
        &specs[1],
        TargetInfo {
            path: "/srv/probe.dat".into(),
            kind: Some(TargetKind::File),
            fstype: "tmpfs".into(),
            cache: Some(Cache::Memory),
            ..TargetInfo::default()
        },
    );
    for run in 0..2u64 {
        let mut h = new_latency_histogram();
        for i in 0..1000u64 {
            // 60 µs .. 480 µs, denser at the fast end, and one I/O of 31 ms per run.
            let ns = 60_000 + (i * i * 7 + run * 13) % 420_000;
            h.record(if i == 500 { 31_000_000 } else { ns }).unwrap();
        }
        let measurement = Measurement {
            engine: EngineKind::IoUring,
            ios: 1000,
            bytes: 4096 * 1000,
            elapsed: Duration::from_millis(250),
            errors: 0,
            first_error: None,
            latency_ns: h,
            // Its thread waited 50 ms of the 250 ms for a CPU: starved (above 0.15).
            cpu_wait: Some(CpuWait {
                waited: Duration::from_millis(50),
                threads: 1,
                in_latency: None,
            }),
            ..Measurement::empty(EngineKind::IoUring)
        };
        store.record(
            &specs[0],
            "randread-4k-qd1",
            &RunOutcome::Ran {
                // The host's CPU was wanted half the time; the device took 150 µs per read.
                context: RunContext {
                    host_cpu_pressure: Some(0.5),
                    device: Some(DeviceTime {
                        ios: 1000,
                        time: Duration::from_millis(150),
                    }),
                },
                result: Box::new(measurement),
                duration: Duration::from_millis(260),
                // Other processes' I/O was seen for 50 ms of the run, 3 in flight meanwhile.
                cost: RunCost {
                    contended: Duration::from_millis(50),
                    others_in_flight_seconds: 0.15,
                },
                yielded_to: None,
            },
        );
    }
    store.record(
        &specs[0],
        "randread-4k-qd32",
        &RunOutcome::Failed {
            error: "open: permission denied".into(),
            duration: Duration::from_millis(1),
            why: ErrorReason::Io,
        },
    );
    let mut h = new_latency_histogram();
    for i in 0..30u64 {
        h.record(90_000 + i * 1_000).unwrap();
    }
    store.record(
        &specs[0],
        "randread-4k-qd32",
        &RunOutcome::Ran {
            context: Default::default(),
            result: Box::new(Measurement {
                engine: EngineKind::IoUring,
                ios: 30,
                bytes: 4096 * 30,
                elapsed: Duration::from_millis(3),
                errors: 2,
                latency_ns: h,
                ending: Ending::Failed,
                ..Measurement::empty(EngineKind::IoUring)
            }),
            duration: Duration::from_millis(4),
            cost: RunCost::default(),
            yielded_to: None,
        },
    );
    store.set_info(
        &specs[2],
        TargetInfo {
            path: "/var/lib/etcd/probe.dat".into(),
            device: Some(device("nvme1n1")),
            kind: Some(TargetKind::File),
            fstype: "ext4".into(),
            ..TargetInfo::default()
        },
    );
    for run in 0..3u64 {
        let (mut writes, mut syncs) = (new_latency_histogram(), new_latency_histogram());
        for i in 0..400u64 {
            // Buffered writes of 3 .. 11 µs; syncs of 250 µs .. 1.05 ms and one of 14 ms.
            writes.record(3_000 + (i * 37) % 8_000).unwrap();
            syncs
                .record(if i == 200 {
                    14_000_000
                } else {
                    250_000 + (i * i * 11) % 800_000 + run * 100_000
                })
                .unwrap();
        }
        store.record(
            &specs[2],
            "etcd-wal",
            &RunOutcome::Ran {
                context: Default::default(),
                result: Box::new(Measurement {
                    engine: EngineKind::Psync,
                    ios: 400,
                    bytes: 400 * 2300,
                    elapsed: Duration::from_millis(200),
                    errors: 0,
                    first_error: None,
                    latency_ns: writes,
                    syncs: Some(Syncs {
                        count: 400,
                        latency_ns: syncs,
                    }),
                    ..Measurement::empty(EngineKind::Psync)
                }),
                duration: Duration::from_millis(230),
                // A durability run is not watched: no cost is charged.
                cost: RunCost::default(),
                yielded_to: None,
            },
        );
    }
    let mut out = Vec::new();
    ProbesCollector::new(store).collect(&mut out).unwrap();
    // When a run ended, and when one last failed, are the values that change from run to run.
    out.retain(|f| {
        f.name != "diskprobe_probe_last_run_timestamp_seconds"
            && f.name != "diskprobe_probe_last_error_timestamp_seconds"
    });
    out
}

fn text(families: &[Family], format: Format) -> String {
    String::from_utf8(exposition::encode(families, format)).unwrap()
}

fn coarse_layout_in_every_format() {
    let f = families(&ClassicBuckets::coarse());
    let plain = text(&f, Format::Text);
    promtool_check_metrics(&plain);
    check_golden("probes.coarse.txt", &plain, "probes_golden");
    check_golden(
        "probes.coarse.openmetrics.txt",
        &text(&f, Format::OpenMetrics),
        "probes_golden",
    );
    let decoded = decode_protobuf(&exposition::encode(&f, Format::Protobuf));
    check_golden(
        "probes.coarse.protobuf.txt",
        &protobuf_dump(&decoded),
        "probes_golden",
    );
}

fn fine_and_listed_layouts() {
    let fine = text(&families(&ClassicBuckets::fine()), Format::Text);
    promtool_check_metrics(&fine);
    check_golden("probes.fine.txt", &fine, "probes_golden");
    let listed = ClassicBuckets::new(vec![0.0001, 0.00025, 0.001, 0.1]).unwrap();
    let listed = text(&families(&listed), Format::Text);
    promtool_check_metrics(&listed);
    check_golden("probes.list.txt", &listed, "probes_golden");
}

crate::tests! {
    coarse_layout_in_every_format: [PROMTOOL],
    fine_and_listed_layouts: [PROMTOOL],
}
