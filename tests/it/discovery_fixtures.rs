//! Discovery rules against fixture trees (`tests/fixtures/discovery`): a `/sys/block` with whole
//! disks, partitions, a RAID member, a device-mapper member, empty and memory-backed devices, a
//! kernel name with a slash and a device whose `dev` does not parse; and a Kubernetes node's
//! mount table with one PVC mounted by two pods, CSI volumes on a partition, on device-mapper, on
//! NFS, on btrfs and on FUSE, a secret on tmpfs, an escaped space and malformed lines.
//!
//! The rules come from TOML, as users write them; what they find is checked target by target,
//! with the notes that say why each other match is not probed.

use crate::common;

use diskprobe_exporter::config::name_template;
use diskprobe_exporter::config::{Config, DiscoverRule};
use diskprobe_exporter::discovery::matching::{Found, Scan, assemble, find};
use diskprobe_exporter::discovery::rescan::scan;
use diskprobe_exporter::host::Roots;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/discovery")
}

fn fixture_scan() -> Scan {
    scan(
        &Roots {
            procfs: fixtures().join("proc"),
            sysfs: fixtures().join("sys"),
            devfs: "/dev".into(),
        },
        Path::new("/dev"),
        true,
    )
    .expect("scan the fixtures")
}

fn rules(toml: &str) -> Vec<DiscoverRule> {
    let text = format!("[defaults]\nprofiles = [\"randread-4k-qd1\"]\n{toml}");
    Config::from_toml(&text, Path::new("rules.toml"))
        .unwrap_or_else(|e| panic!("{e}"))
        .discover
}

fn rule(toml: &str) -> DiscoverRule {
    rules(toml).remove(0)
}

/// `(name, path)` of every target found.
fn targets(found: &Found) -> Vec<(String, String)> {
    found
        .targets
        .iter()
        .map(|t| (t.name.clone(), t.path.display().to_string()))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(n, p)| ((*n).to_owned(), (*p).to_owned()))
        .collect()
}

const CSI: &str = r#"mountpoint_include = "^/var/lib/kubelet/pods/[^/]+/volumes/kubernetes\\.io~csi/([^/]+)/mount$""#;

fn the_scan_reads_devices_partitions_and_mounts() {
    let s = fixture_scan();
    let names: Vec<&str> = s.devices.iter().map(|d| d.kname.as_str()).collect();
    assert_eq!(
        names,
        [
            "cciss/c0d0",
            "dm-0",
            "dm-1",
            "loop0",
            "loop1",
            "md127",
            "nvme0n1",
            "nvme0n1p1",
            "sda",
            "sda1",
            "sda2",
            "sdb",
            "sdc",
            "sr0",
            "vda",
            "zram0"
        ],
        "'broken' has no readable dev"
    );
    let sda2 = s.devices.iter().find(|d| d.kname == "sda2").unwrap();
    assert_eq!(sda2.parent.as_deref(), Some("sda"));
    assert_eq!(sda2.holders, 1);
    assert_eq!(
        sda2.serial, "WD-WCC4N1234567",
        "a partition has its disk's serial"
    );
    let sdc = s.devices.iter().find(|d| d.kname == "sdc").unwrap();
    assert_eq!(sdc.sectors, 0, "no size file");
    assert_eq!(s.mounts.len(), 15, "two malformed lines skipped");
    assert!(s.mounts.iter().any(|m| m.mountpoint == "/mnt/scratch disk"));
    assert!(s.sources.is_empty(), "/dev/fixture-btrfs is no device here");
}

fn the_mount_table_is_the_agents_own_where_inits_cannot_be_read() {
    let proc = tempfile::tempdir().unwrap();
    std::fs::create_dir(proc.path().join("self")).unwrap();
    std::fs::write(
        proc.path().join("self/mountinfo"),
        "30 1 8:1 / /data rw - ext4 /dev/sda1 rw\n",
    )
    .unwrap();
    let roots = Roots {
        procfs: proc.path().to_owned(),
        sysfs: fixtures().join("sys"),
        devfs: "/dev".into(),
    };
    let s = scan(&roots, Path::new("/dev"), true).unwrap();
    assert_eq!(s.mounts.len(), 1);
    assert_eq!(s.mounts[0].mountpoint, "/data");
    // Without a sysfs, there is nothing to scan.
    let none = Roots {
        procfs: proc.path().to_owned(),
        sysfs: proc.path().join("nonexistent"),
        devfs: "/dev".into(),
    };
    let err = scan(&none, Path::new("/dev"), true).unwrap_err();
    assert!(err.to_string().contains("nonexistent/block"), "{err}");
}

fn a_block_rule_takes_whole_disks_and_says_why_it_skips_the_rest() {
    let found = find(
        &rule("[[discover]]\nkind = \"block\"\n"),
        &fixture_scan(),
        &[],
    );
    assert_eq!(
        targets(&found),
        pairs(&[
            ("nvme0n1", "/dev/nvme0n1"),
            ("sda", "/dev/sda"),
            ("vda", "/dev/vda"),
        ])
    );
    assert_eq!(
        found.notes,
        [
            "rule 0: sdb has holders (a RAID, multipath or device-mapper member; set include_held = true to probe it); not probed",
            "rule 0: sdc is empty (size 0); not probed",
        ]
    );
    let t = &found.targets[0];
    assert_eq!(t.rule.as_deref(), Some("0"));
    assert!(t.settings.profiles.iter().all(|p| !p.rw.is_write()));
    assert!(t.settings.writes == diskprobe_exporter::config::Writes::Forbidden);
}

fn partitions_and_held_devices_on_request_memory_never_and_the_first_by_name_over_the_limit() {
    let r = rule(
        "[[discover]]\nid = \"all\"\nkind = \"block\"\ndevice_exclude = \"^$\"\n\
         include_partitions = true\ninclude_held = true\nmax_targets = 5\n",
    );
    let found = find(&r, &fixture_scan(), &[]);
    assert_eq!(
        targets(&found),
        pairs(&[
            ("cciss/c0d0", "/dev/cciss/c0d0"),
            ("dm-0", "/dev/dm-0"),
            ("dm-1", "/dev/dm-1"),
            ("loop1", "/dev/loop1"),
            ("md127", "/dev/md127"),
        ])
    );
    assert_eq!(
        found.dropped,
        ["nvme0n1", "nvme0n1p1", "sda", "sda1", "sda2", "sdb", "vda"]
    );
    assert_eq!(
        found.notes,
        [
            "rule all: loop0 is empty (size 0); not probed",
            "rule all: sdc is empty (size 0); not probed",
            "rule all: sr0 is empty (size 0); not probed",
            "rule all: zram0 is memory-backed; not probed",
        ]
    );
}

fn names_come_from_capture_groups_serials_and_wwns() {
    let s = fixture_scan();
    let by_group = rule(
        "[[discover]]\nkind = \"block\"\ndevice_include = \"^sd([a-z])$\"\nname = \"hdd-$1\"\n",
    );
    assert_eq!(
        targets(&find(&by_group, &s, &[])),
        pairs(&[("hdd-a", "/dev/sda")])
    );
    let by_serial = rule("[[discover]]\nkind = \"block\"\nname = \"disk-{serial}\"\n");
    assert_eq!(
        targets(&find(&by_serial, &s, &[])),
        pairs(&[
            ("disk-S4EWNX0R123456", "/dev/nvme0n1"),
            ("disk-WD-WCC4N1234567", "/dev/sda"),
            ("disk-vol0abc123", "/dev/vda"),
        ])
    );
    let by_wwn = rule("[[discover]]\nkind = \"block\"\nname = \"{wwn}\"\n");
    let found = find(&by_wwn, &s, &[]);
    assert_eq!(
        targets(&found),
        pairs(&[
            ("eui.0025388b91b2c3d4", "/dev/nvme0n1"),
            ("naa.50014ee2b1234567", "/dev/sda"),
        ])
    );
    assert!(
        found
            .notes
            .contains(&"rule 0: vda has no {wwn} for the name \"{wwn}\"; not probed".to_owned()),
        "{:?}",
        found.notes
    );
    // A constant name: the first device in kernel-name order has it.
    let constant = rule("[[discover]]\nkind = \"block\"\nname = \"disk\"\n");
    let found = find(&constant, &s, &[]);
    assert_eq!(targets(&found), pairs(&[("disk", "/dev/nvme0n1")]));
    assert!(found.notes.contains(
        &"rule 0: sda would be named \"disk\", as nvme0n1 already is; not probed".to_owned()
    ));
}

fn a_fallback_names_every_disk_and_a_name_that_stays_empty_is_counted() {
    let s = fixture_scan();
    // sdb has a WWN only, vda a serial only, loop1 neither: each gets the first fact it has.
    let r = rule(
        "[[discover]]\nkind = \"block\"\ndevice_exclude = \"^$\"\ninclude_held = true\n\
         name = \"disk-{wwn|serial|kname}\"\n",
    );
    let found = find(&r, &s, &[]);
    assert_eq!(
        targets(&found),
        pairs(&[
            ("disk-cciss/c0d0", "/dev/cciss/c0d0"),
            ("disk-dm-0", "/dev/dm-0"),
            ("disk-dm-1", "/dev/dm-1"),
            ("disk-eui.0025388b91b2c3d4", "/dev/nvme0n1"),
            ("disk-loop1", "/dev/loop1"),
            ("disk-md127", "/dev/md127"),
            ("disk-naa.50014ee2b1234567", "/dev/sda"),
            ("disk-naa.50014ee2b7654321", "/dev/sdb"),
            ("disk-vol0abc123", "/dev/vda"),
        ])
    );
    assert_eq!(found.unnamed, 0);
    // Without the kernel name to fall back on, the devices with neither fact are not probed,
    // and counted: loop1, md127, dm-0, dm-1 and cciss/c0d0.
    let r = rule(
        "[[discover]]\nkind = \"block\"\ndevice_exclude = \"^$\"\ninclude_held = true\nname = \"{serial|wwn}\"\n",
    );
    let found = find(&r, &s, &[]);
    assert_eq!(
        targets(&found),
        pairs(&[
            ("S4EWNX0R123456", "/dev/nvme0n1"),
            ("WD-WCC4N1234567", "/dev/sda"),
            ("naa.50014ee2b7654321", "/dev/sdb"),
            ("vol0abc123", "/dev/vda"),
        ])
    );
    assert_eq!(found.unnamed, 5, "{:?}", found.notes);
    assert!(
        found.notes.contains(
            &"rule 0: loop1 has no {serial|wwn} for the name \"{serial|wwn}\"; not probed"
                .to_owned()
        ),
        "{:?}",
        found.notes
    );
    // A name that renders empty is counted too.
    let r =
        rule("[[discover]]\nkind = \"block\"\ndevice_include = \"^sd(x?)[ab]$\"\nname = \"$1\"\n");
    let found = find(&r, &s, &[]);
    assert!(found.targets.is_empty());
    assert_eq!(found.unnamed, 1, "sda (sdb is held): {:?}", found.notes);
}

fn a_mount_rule_probes_each_volumes_device_once_under_its_name() {
    let found = find(
        &rule(&format!(
            "[[discover]]\nid = \"pvc\"\nkind = \"mount\"\n{CSI}\nname = \"pv-$1\"\n"
        )),
        &fixture_scan(),
        &[],
    );
    assert_eq!(
        targets(&found),
        pairs(&[("pv-pvc-1111", "/dev/sda1"), ("pv-pvc-2222", "/dev/dm-1")])
    );
    let pods = "/var/lib/kubelet/pods";
    let csi = "volumes/kubernetes.io~csi";
    let pod1 = "1c2d0000-0000-0000-0000-000000000001";
    let pod2 = "9e8f0000-0000-0000-0000-000000000002";
    let pod3 = "5a6b0000-0000-0000-0000-000000000003";
    assert_eq!(
        found.notes,
        [
            format!(
                "rule pvc: {pods}/{pod3}/{csi}/pvc-btrfs/mount (btrfs) has no block device; not probed (set file to probe a file inside it)"
            ),
            format!(
                "rule pvc: {pods}/{pod3}/{csi}/pvc-nfs/mount (nfs4) has no block device; not probed (set file to probe a file inside it)"
            ),
            format!(
                "rule pvc: {pods}/{pod3}/{csi}/pvc-s3/mount (fuse.s3fs) has no block device; not probed (set file to probe a file inside it)"
            ),
            format!(
                "rule pvc: {pods}/{pod2}/{csi}/pvc-1111/mount is the same volume as {pods}/{pod1}/{csi}/pvc-1111/mount; probed once, as {pods}/{pod1}/{csi}/pvc-1111/mount"
            ),
        ]
    );
    // A btrfs volume is anonymous in the mount table: its source names the device.
    let mut s = fixture_scan();
    s.sources.insert("/dev/fixture-btrfs".to_owned(), (7, 1));
    let found = find(
        &rule(&format!(
            "[[discover]]\nkind = \"mount\"\n{CSI}\nfstype_include = \"^btrfs$\"\nname = \"pv-$1-{{kname}}\"\n"
        )),
        &s,
        &[],
    );
    assert_eq!(
        targets(&found),
        pairs(&[("pv-pvc-btrfs-loop1", "/dev/loop1")])
    );
    assert!(found.notes.is_empty(), "{:?}", found.notes);
}

fn a_mount_rule_with_file_probes_a_file_inside_each_volume() {
    let s = fixture_scan();
    let found = find(
        &rule(&format!(
            "[[discover]]\nkind = \"mount\"\n{CSI}\nfstype_include = \"^(ext4|xfs|nfs4)$\"\nname = \"pv-$1\"\nfile = \"diskprobe.dat\"\nsize = \"16MiB\"\n"
        )),
        &s,
        &[],
    );
    let mount = |pod: &str, pv: &str| {
        format!("/var/lib/kubelet/pods/{pod}/volumes/kubernetes.io~csi/{pv}/mount/diskprobe.dat")
    };
    assert_eq!(
        targets(&found),
        vec![
            (
                "pv-pvc-1111".to_owned(),
                mount("1c2d0000-0000-0000-0000-000000000001", "pvc-1111")
            ),
            (
                "pv-pvc-2222".to_owned(),
                mount("1c2d0000-0000-0000-0000-000000000001", "pvc-2222")
            ),
            (
                "pv-pvc-nfs".to_owned(),
                mount("5a6b0000-0000-0000-0000-000000000003", "pvc-nfs")
            ),
        ]
    );
    assert!(
        found
            .targets
            .iter()
            .all(|t| t.settings.size == Some(16 << 20))
    );
    // The default name is the kernel name, which an NFS volume does not have.
    let found = find(
        &rule(&format!(
            "[[discover]]\nkind = \"mount\"\n{CSI}\nfstype_include = \"^nfs4$\"\nfile = \"p\"\n"
        )),
        &s,
        &[],
    );
    assert!(found.targets.is_empty());
    assert_eq!(found.notes.len(), 1);
    assert!(
        found.notes[0].contains("pvc-nfs/mount has no {kname} for the name \"{kname}\""),
        "{:?}",
        found.notes
    );
}

fn escaped_mountpoints_and_slashed_kernel_names() {
    let s = fixture_scan();
    let found = find(
        &rule(
            "[[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/mnt/(.+)$\"\nname = \"$1\"\n",
        ),
        &s,
        &[],
    );
    assert_eq!(targets(&found), pairs(&[("scratch disk", "/dev/loop1")]));
    let found = find(
        &rule("[[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/srv/array$\"\n"),
        &s,
        &[],
    );
    assert_eq!(targets(&found), pairs(&[("cciss/c0d0", "/dev/cciss/c0d0")]));
}

fn a_block_rule_with_skip_claimed_leaves_out_the_disks_a_mount_rule_probes() {
    let s = fixture_scan();
    let toml = |skip: &str| {
        format!(
            "[[discover]]\nid = \"disks\"\nkind = \"block\"\n{skip}\n\
             [[discover]]\nid = \"pvcs\"\nkind = \"mount\"\n{CSI}\nname = \"pv-$1\"\n"
        )
    };
    let names = |rules: &[DiscoverRule]| {
        let found: Vec<Option<Found>> = rules.iter().map(|r| Some(find(r, &s, &[]))).collect();
        let (all, counts, notes) = assemble(rules, &found, &BTreeSet::new());
        let names: Vec<String> = all.iter().map(|t| t.name.clone()).collect();
        (names, counts, notes)
    };
    // Without it, the disk under a PersistentVolume is probed twice: as a disk and as the volume.
    let (all, counts, notes) = names(&rules(&toml("")));
    assert_eq!(all, ["nvme0n1", "sda", "vda", "pv-pvc-1111", "pv-pvc-2222"]);
    assert_eq!(counts, [3, 2]);
    assert!(notes.is_empty(), "{notes:?}");
    // With it, sda (under pvc-1111's partition sda1) is left to the mount rule.
    let (all, counts, notes) = names(&rules(&toml("skip_claimed = true")));
    assert_eq!(all, ["nvme0n1", "vda", "pv-pvc-1111", "pv-pvc-2222"]);
    assert_eq!(counts, [2, 2]);
    assert_eq!(
        notes,
        [
            "rule disks: /dev/sda is probed by mount rule pvcs (as pv-pvc-1111); not probed by this rule (skip_claimed)"
        ]
    );
    // The key belongs to block rules.
    let err = Config::from_toml(
        &format!("[[discover]]\nkind = \"mount\"\n{CSI}\nskip_claimed = true\n"),
        Path::new("rules.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("skip_claimed: applies to kind = \"block\" rules only"),
        "{err}"
    );
}

fn names_are_used_once_across_rules_and_never_a_configured_targets() {
    let s = fixture_scan();
    let rules = rules(&format!(
        "[[discover]]\nid = \"first\"\nkind = \"mount\"\n{CSI}\nname = \"pv-$1\"\n\
         [[discover]]\nid = \"second\"\nkind = \"mount\"\n{CSI}\nfstype_include = \"^ext4$\"\nname = \"pv-$1\"\n\
         [[discover]]\nid = \"disks\"\nkind = \"block\"\n"
    ));
    let found: Vec<Option<Found>> = rules.iter().map(|r| Some(find(r, &s, &[]))).collect();
    let configured: BTreeSet<String> = ["pv-pvc-2222".to_owned()].into();
    let (all, counts, notes) = assemble(&rules, &found, &configured);
    let names: Vec<(&str, &str)> = all
        .iter()
        .map(|t| (t.name.as_str(), t.rule.as_deref().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("pv-pvc-1111", "first"),
            ("nvme0n1", "disks"),
            ("sda", "disks"),
            ("vda", "disks")
        ]
    );
    assert_eq!(counts, [1, 0, 3]);
    assert_eq!(
        notes,
        [
            "rule first: the name \"pv-pvc-2222\" is taken by a [[targets]] entry; /dev/dm-1 not probed by this rule",
            "rule second: the name \"pv-pvc-1111\" is taken by rule first; /dev/sda1 not probed by this rule",
        ]
    );
    // A rule not scanned yet contributes nothing.
    let (all, counts, _) = assemble(&rules, &[None, None, None], &configured);
    assert!(all.is_empty());
    assert_eq!(counts, [0, 0, 0]);
}

fn devices_are_probed_under_path_devfs_and_anonymous_mounts_found_by_their_source() {
    // A container mounts the host's /dev elsewhere: the mount table still says /dev/... .
    if !common::require(common::is_root(), "root (mknod of a device node)") {
        return;
    }
    let dev = tempfile::tempdir_in("/var/tmp").unwrap();
    // A node only (7:1 is loop1 in the fixture's sysfs); nothing opens it.
    let status = std::process::Command::new("mknod")
        .arg(dev.path().join("fixture-btrfs"))
        .args(["b", "7", "1"])
        .status()
        .unwrap();
    assert!(status.success(), "mknod");
    let roots = Roots {
        procfs: fixtures().join("proc"),
        sysfs: fixtures().join("sys"),
        devfs: "/dev".into(),
    };
    let s = scan(&roots, dev.path(), true).unwrap();
    assert_eq!(
        s.sources.get("/dev/fixture-btrfs"),
        Some(&(7, 1)),
        "the btrfs source, found under --path.devfs"
    );
    let found = find(
        &rule(&format!(
            "[[discover]]\nkind = \"mount\"\n{CSI}\nfstype_include = \"^btrfs$\"\nname = \"pv-$1\"\n"
        )),
        &s,
        &[],
    );
    let node = dev.path().join("loop1").display().to_string();
    assert_eq!(targets(&found), vec![("pv-pvc-btrfs".to_owned(), node)]);
    let found = find(
        &rule("[[discover]]\nkind = \"block\"\ndevice_include = \"^sda$\"\n"),
        &s,
        &[],
    );
    assert_eq!(
        targets(&found),
        vec![(
            "sda".to_owned(),
            dev.path().join("sda").display().to_string()
        )]
    );
}

fn a_rules_cohort_template_takes_its_capture_groups_and_the_disks_model() {
    let s = fixture_scan();
    let by_model = rule(
        "[[discover]]\nkind = \"block\"\ndevice_include = \"^(nvme|sd)[a-z0-9]+$\"\ncohort = \"$1-{model}\"\n",
    );
    let found = find(&by_model, &s, &[]);
    let cohorts: Vec<(String, String)> = found
        .targets
        .iter()
        .map(|t| {
            let kname = t.path.file_name().unwrap().to_str().unwrap();
            let device = s.devices.iter().find(|d| d.kname == kname);
            (
                t.settings.cohort.clone(),
                name_template::cohort(&t.settings.cohort, device),
            )
        })
        .collect();
    // The groups are filled in by the rule, the model (with its spaces, padded by sysfs) where
    // the target is exported.
    assert_eq!(
        cohorts,
        [
            (
                "nvme-{model}".into(),
                "nvme-Samsung_SSD_970_EVO_Plus_1TB".into()
            ),
            ("sd-{model}".into(), "sd-WDC_WD40EFRX-68N".into()),
        ],
        "{:?}",
        found.notes
    );
}

crate::tests! {
    the_scan_reads_devices_partitions_and_mounts,
    the_mount_table_is_the_agents_own_where_inits_cannot_be_read,
    a_block_rule_takes_whole_disks_and_says_why_it_skips_the_rest,
    partitions_and_held_devices_on_request_memory_never_and_the_first_by_name_over_the_limit,
    names_come_from_capture_groups_serials_and_wwns,
    a_fallback_names_every_disk_and_a_name_that_stays_empty_is_counted,
    a_mount_rule_probes_each_volumes_device_once_under_its_name,
    a_mount_rule_with_file_probes_a_file_inside_each_volume,
    escaped_mountpoints_and_slashed_kernel_names,
    a_block_rule_with_skip_claimed_leaves_out_the_disks_a_mount_rule_probes,
    names_are_used_once_across_rules_and_never_a_configured_targets,
    devices_are_probed_under_path_devfs_and_anonymous_mounts_found_by_their_source,
    a_rules_cohort_template_takes_its_capture_groups_and_the_disks_model,
}
