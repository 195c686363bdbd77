//! The block-device model against sysfs trees of every kind of disk (`tests/fixtures/blockdev`,
//! written by its `make_trees.py` as the kernel lays them out): NVMe EBS and instance store,
//! Azure SCSI (LUN in the SCSI address) and Azure NVMe, GCP SCSI and NVMe, virtio-blk with a
//! serial, virtio-scsi with a partition, a device-mapper volume over two disks, an MD RAID over
//! partitions, a loop device.
//!
//! Per tree, a golden file (`tests/golden/blockdev/TREE.txt`) holds what the agent says of each
//! disk: `diskprobe_disk_info`, `diskprobe_target_disk_info` of a target on each device, the name
//! a block discovery rule gives it, and the lost-disk series when it vanishes. One test checks
//! that these agree on serial, WWN and volume id for the same disk, in every tree.

use crate::common;

use diskprobe_exporter::blockdev;
use diskprobe_exporter::collectors::Collector;
use diskprobe_exporter::collectors::disk_metrics::DiskstatsCollector;
use diskprobe_exporter::collectors::limit_metrics::LimitsCollector;
use diskprobe_exporter::config::Config;
use diskprobe_exporter::device_filter::DeviceFilter;
use diskprobe_exporter::discovery::lost::{LostTracker, Rescan};
use diskprobe_exporter::discovery::matching::{Scan, find};
use diskprobe_exporter::discovery::rescan::scan;
use diskprobe_exporter::exposition::{Format, encode};
use diskprobe_exporter::host::Roots;
use diskprobe_exporter::series::{SeriesStore, TargetInfo};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const TREES: &[&str] = &[
    "aws-ebs",
    "aws-instance-store",
    "azure-nvme",
    "azure-scsi",
    "dm-two-disks",
    "gcp-nvme",
    "gcp-scsi",
    "loop",
    "md-raid",
    "virtio-blk",
    "virtio-scsi",
];

/// The name template the checks use: what the cloud calls a disk first.
const TEMPLATE: &str = "disk-{volume_id|wwn|serial|kname}";

fn tree(name: &str) -> PathBuf {
    common::repo_root()
        .join("tests/fixtures/blockdev")
        .join(name)
}

fn roots(name: &str) -> Roots {
    Roots {
        procfs: tree(name).join("proc"),
        sysfs: tree(name).join("sys"),
        devfs: "/dev".into(),
    }
}

/// What the agent says about the devices of one tree.
struct Said {
    /// `diskprobe_disk_info` samples.
    disk_info: Vec<String>,
    /// `diskprobe_target_disk_info` samples, a target `t-KNAME` on each device.
    target_disk_info: Vec<String>,
    /// `(kname, target name)` of what a block rule over every device finds.
    discovered: Vec<(String, String)>,
    /// `diskprobe_discovered_target_lost_timestamp_seconds` label sets once every disk is gone.
    lost: Vec<String>,
}

fn samples(families: &[diskprobe_exporter::exposition::Family], name: &str) -> Vec<String> {
    let text = String::from_utf8(encode(families, Format::Text)).unwrap();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .map(str::to_owned)
        .collect()
}

fn said(name: &str) -> Said {
    let roots = roots(name);
    let all = DeviceFilter::Exclude(regex::Regex::new("^$").unwrap());
    let diskstats = DiskstatsCollector::new(roots.procfs.clone(), roots.sysfs.clone(), all);
    let mut out = Vec::new();
    diskstats.collect(&mut out).unwrap();
    let disk_info = samples(&out, "diskprobe_disk_info");

    let scanned = scan(&roots, Path::new("/dev"), false).unwrap();
    let toml: String = scanned
        .devices
        .iter()
        .map(|d| {
            format!(
                "[[targets]]\nname = \"t-{}\"\npath = \"/dev/{}\"\nprofiles = [\"randread-4k-qd1\"]\n",
                d.kname, d.kname
            )
        })
        .collect();
    let config = Config::from_toml(&toml, Path::new("t.toml")).unwrap();
    let store = Arc::new(SeriesStore::new());
    let specs: Vec<_> = config.targets.iter().cloned().map(Arc::new).collect();
    store.set_targets(&specs);
    for (spec, d) in specs.iter().zip(&scanned.devices) {
        // What a stat of /dev/KNAME finds: the device by its number.
        let device = blockdev::by_dev(&roots.sysfs, d.major, d.minor);
        store.set_info(
            spec,
            TargetInfo {
                device,
                ..TargetInfo::default()
            },
        );
    }
    let limits = LimitsCollector::new(store, roots.sysfs.clone(), None);
    let mut out = Vec::new();
    limits.collect(&mut out).unwrap();
    let target_disk_info = samples(&out, "diskprobe_target_disk_info");

    let rules = Config::from_toml(
        &format!(
            "[defaults]\nprofiles = [\"randread-4k-qd1\"]\n[[discover]]\nid = \"disks\"\nkind = \"block\"\n\
             device_exclude = \"^$\"\ninclude_partitions = true\ninclude_held = true\nname = \"{TEMPLATE}\"\n"
        ),
        Path::new("rules.toml"),
    )
    .unwrap()
    .discover;
    let found = find(&rules[0], &scanned, &[]);
    let discovered = found
        .targets
        .iter()
        .map(|t| {
            (
                t.path
                    .display()
                    .to_string()
                    .trim_start_matches("/dev/")
                    .to_owned(),
                t.name.clone(),
            )
        })
        .collect();

    let mut tracker = LostTracker::load(None);
    tracker.after_rescan(&Rescan {
        rules: &rules,
        ready: &[0],
        targets: &found.targets,
        scan: &scanned,
        now: 1.0,
    });
    let gone = Scan {
        devices: Vec::new(),
        ..scanned
    };
    tracker.after_rescan(&Rescan {
        rules: &rules,
        ready: &[0],
        targets: &[],
        scan: &gone,
        now: 2.0,
    });
    let lost = tracker
        .entries()
        .iter()
        .map(|l| {
            format!(
                "{{target={:?},device={:?},model={:?},serial={:?},wwn={:?},volume_id={:?}}}",
                l.target, l.device, l.model, l.serial, l.wwn, l.volume_id
            )
        })
        .collect();
    Said {
        disk_info,
        target_disk_info,
        discovered,
        lost,
    }
}

/// The labels of one exposition sample, by name.
fn labels(sample: &str) -> BTreeMap<String, String> {
    let inner = &sample[sample.find('{').unwrap() + 1..sample.rfind('}').unwrap()];
    let mut out = BTreeMap::new();
    let mut rest = inner;
    while let Some(eq) = rest.find("=\"") {
        let key = rest[..eq].trim_start_matches(',').to_owned();
        let value_start = eq + 2;
        let end = rest[value_start..].find('"').unwrap() + value_start;
        out.insert(key, rest[value_start..end].to_owned());
        rest = &rest[end + 1..];
    }
    out
}

fn every_tree_has_its_golden_description() {
    for name in TREES {
        let s = said(name);
        let mut text = String::new();
        for (title, lines) in [
            ("diskprobe_disk_info", &s.disk_info),
            ("diskprobe_target_disk_info", &s.target_disk_info),
            ("lost", &s.lost),
        ] {
            text.push_str(&format!("# {title}\n"));
            for l in lines {
                text.push_str(l);
                text.push('\n');
            }
        }
        text.push_str(&format!("# discovery names ({TEMPLATE})\n"));
        for (kname, target) in &s.discovered {
            text.push_str(&format!("{kname} {target}\n"));
        }
        common::check_golden(&format!("blockdev/{name}.txt"), &text, "blockdev_fixtures");
    }
}

fn every_view_of_a_disk_gives_the_same_serial_wwn_and_volume_id() {
    for name in TREES {
        let s = said(name);
        let info: BTreeMap<String, BTreeMap<String, String>> = s
            .disk_info
            .iter()
            .map(|l| {
                let l = labels(l);
                (l["device"].clone(), l)
            })
            .collect();
        assert!(!info.is_empty(), "{name}: no disk_info");
        for sample in &s.target_disk_info {
            let t = labels(sample);
            let disk = &info[&t["device"]];
            for key in ["serial", "wwn", "volume_id"] {
                assert_eq!(t[key], disk[key], "{name}: {key} of {sample}");
            }
        }
        assert!(
            !s.target_disk_info.is_empty(),
            "{name}: no target_disk_info"
        );
        for (kname, target) in &s.discovered {
            let disk = &info[kname];
            let expected = ["volume_id", "wwn", "serial"]
                .iter()
                .map(|k| disk[*k].as_str())
                .find(|v| !v.trim().is_empty())
                .unwrap_or(kname);
            // Discovery makes the name a valid target name; the fixtures' identifiers are.
            assert_eq!(target, &format!("disk-{expected}"), "{name}: {kname}");
        }
        assert_eq!(s.lost.len(), s.discovered.len(), "{name}: every disk lost");
        for lost in &s.lost {
            let l = labels(lost);
            let disk = &info[&l["device"]];
            for key in ["serial", "wwn", "volume_id"] {
                assert_eq!(l[key], disk[key], "{name}: {key} of {lost}");
            }
        }
    }
}

fn cloud_identities_are_read_where_the_kernel_shows_them() {
    let of = |tree: &str, device: &str| {
        let s = said(tree);
        let line = s
            .disk_info
            .iter()
            .find(|l| labels(l)["device"] == device)
            .unwrap_or_else(|| panic!("{tree}: no {device}"))
            .clone();
        let l = labels(&line);
        (
            l["cloud"].clone(),
            l["volume_id"].clone(),
            l["lun"].clone(),
            l["serial"].clone(),
        )
    };
    let t = |a: &str, b: &str, c: &str, d: &str| {
        (a.to_owned(), b.to_owned(), c.to_owned(), d.to_owned())
    };
    assert_eq!(
        of("aws-ebs", "nvme1n1"),
        t("aws", "vol-0123456789abcdef0", "", "vol0123456789abcdef0")
    );
    assert_eq!(
        of("aws-ebs", "nvme1n1p1"),
        t("aws", "vol-0123456789abcdef0", "", "vol0123456789abcdef0")
    );
    assert_eq!(of("aws-instance-store", "nvme0n1").1, "");
    assert_eq!(of("azure-scsi", "sdc"), t("azure", "", "2", ""));
    assert_eq!(
        of("azure-scsi", "sda"),
        t("azure", "", "", ""),
        "the OS disk has no LUN"
    );
    assert_eq!(
        of("azure-nvme", "nvme0n1").2,
        "",
        "namespace 1 is the OS disk"
    );
    assert_eq!(of("azure-nvme", "nvme0n3").2, "1");
    assert_eq!(of("gcp-scsi", "sdb"), t("gcp", "data-disk-1", "", ""));
    assert_eq!(of("gcp-nvme", "nvme0n1").0, "gcp");
    assert_eq!(
        of("virtio-blk", "vdb"),
        t("", "3f1c2b9e-7d4a-4e2b-9", "", "3f1c2b9e-7d4a-4e2b-9")
    );
    assert_eq!(of("virtio-scsi", "sda1"), t("", "", "", ""));
}

fn a_volume_over_two_disks_is_both_disks_to_every_part() {
    let roots = roots("dm-two-disks");
    let dm = blockdev::by_dev(&roots.sysfs, 253, 0).unwrap();
    assert_eq!(dm.kind, Some(blockdev::Kind::DeviceMapper));
    assert_eq!(dm.disks, ["vdb", "vdc"]);
    assert_eq!(blockdev::disks_under(&roots.sysfs, "dm-0"), dm.disks);
    // The device lock.
    let config = Config::from_toml(
        "[[targets]]\nname = \"vol\"\npath = \"/dev/dm-0\"\nprofiles = [\"randread-4k-qd1\"]\n",
        Path::new("t.toml"),
    )
    .unwrap();
    let spec = Arc::new(config.targets[0].clone());
    let key = diskprobe_exporter::scheduler::devices::DeviceKey::of(&spec, Some(&dm));
    assert_eq!(
        key,
        diskprobe_exporter::scheduler::devices::DeviceKey::Disks(dm.disks.clone())
    );
    // The contention watch reads both disks' counters.
    let reader = diskprobe_exporter::blockdev::counters::DiskReader::new(&roots.sysfs, &dm.disks);
    assert_eq!(reader.disk_dirs().len(), 2);
    // The limits and diskprobe_target_disk_info, whose disks the cohort rules join on.
    let s = said("dm-two-disks");
    let vol: Vec<String> = s
        .target_disk_info
        .iter()
        .map(|l| labels(l))
        .filter(|l| l["target"] == "t-dm-0")
        .map(|l| l["device"].clone())
        .collect();
    assert_eq!(vol, dm.disks);
    // MD over partitions: the partitions' disks.
    let md = blockdev::by_name(&roots_of("md-raid"), "md127").unwrap();
    assert_eq!(
        (md.kind, md.disks.as_slice()),
        (
            Some(blockdev::Kind::Md),
            &["sdb".to_owned(), "sdc".to_owned()][..]
        )
    );
}

fn roots_of(tree: &str) -> PathBuf {
    roots(tree).sysfs
}

crate::tests! {
    every_tree_has_its_golden_description,
    every_view_of_a_disk_gives_the_same_serial_wwn_and_volume_id,
    cloud_identities_are_read_where_the_kernel_shows_them,
    a_volume_over_two_disks_is_both_disks_to_every_part,
}
