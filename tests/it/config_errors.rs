//! Configuration errors: each bad file must be reported with its exact location and message,
//! and `--config.check` must exit 2 for it (0 for good files).

use crate::common;

use diskprobe_exporter::config::probe_settings::DEFAULT_SKIP_BUSY_ABOVE;
use diskprobe_exporter::config::{BusyLimits, Config, TargetSpec};
use diskprobe_exporter::probe::profile::ProbeClass;
use std::path::Path;
use std::process::Command;

/// (file content, expected error after "bad.toml:").
const BAD: &[(&str, &str)] = &[
    (
        "[[targets]]\nname = \"a\\u0000b\"\npath = \"/x\"\n",
        "2:8: targets[0].name: expected printable characters only, found U+0000 at character 2",
    ),
    (
        "[profiles.\"p\\nq\"]\nfio = \"-rw=randread -bs=4k\"\n",
        "1:11: profiles: expected printable characters only, found U+000A at character 2",
    ),
    (
        "[[discover]]\nid = \"r\\u001b[31m\"\nkind = \"block\"\n",
        "2:6: discover[0].id: expected printable characters only, found U+001B at character 2",
    ),
    (
        "[web]\nlisten_adress = \":9957\"\n",
        "2:1: web.listen_adress: unknown field `listen_adress`, expected `listen_address` or `telemetry_path`",
    ),
    (
        "[webb]\n",
        "1:2: unknown field `webb`, expected one of `web`, `diskstats`, `defaults`, `scheduler`, `targets`, `profiles`, `discover`, `histograms`, `limits`, `cloud_stats`, `retired`",
    ),
    (
        "[web]\nlisten_address = 9957\n",
        "2:18: web.listen_address: invalid type: integer `9957`, expected a string",
    ),
    (
        "[web]\n  listen_address = \"localhost\"\n",
        "2:20: web.listen_address: expected host:port or :port, found \"localhost\"",
    ),
    (
        "[web]\nlisten_address = \":65536\"\n",
        "2:18: web.listen_address: expected a port number 0-65535 after ':', found \"65536\"",
    ),
    (
        "[web]\ntelemetry_path = \"metrics\"\n",
        "2:18: web.telemetry_path: expected an absolute URL path other than / and /-/..., found \"metrics\"",
    ),
    (
        "# comment\n[diskstats]\ndevice_exclude = \"(\"\n",
        "3:18: diskstats.device_exclude: expected a regular expression, unclosed group",
    ),
    (
        "[diskstats]\ndevice_include = \"a\"\ndevice_exclude = \"b\"\n",
        "2:18: diskstats: device_include and device_exclude are mutually exclusive; set one",
    ),
    (
        "[diskstats]\ndevice_exclud = \"b\"\n",
        "2:1: diskstats.device_exclud: unknown field `device_exclud`, expected `device_include` or `device_exclude`",
    ),
    (
        "x = \n",
        "1:5: x: string values must be quoted, expected literal string",
    ),
    ("[web]\n[web]\n", "2:2: web: duplicate key"),
    (
        "[histograms]\nclassic_buckets = [0.001, 0.0005]\n",
        "2:19: histograms.classic_buckets: bucket bound 0.0005 (number 2) is not above the one before it",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\nprofiles = [\"nope\"]\n",
        "4:13: targets[0].profiles: unknown profile \"nope\"; expected one of: randread-4k-qd1, randread-4k-qd32, randread-4k-qd128, read-1m-qd16, read-1m-qd64, randwrite-4k-qd1, randwrite-4k-qd32, randwrite-4k-qd128, write-1m-qd16, write-1m-qd64, randread-4k-qd1-gentle, randwrite-4k-qd1-gentle, etcd-wal, write-4k-qd1-fdatasync",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\nprofiles = [\"randread-4k-qd1\", \"randwrite-4k-qd1\"]\n",
        "4:32: targets[0].profiles: profile \"randwrite-4k-qd1\" writes; set allow_writes = true on this target to allow writes to its probe file (block devices also need allow_device_writes = true)",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\ninterval = \"1m\"\n",
        "4:12: targets[0].interval: profiles [\"randread-4k-qd1-gentle\"] run for 1s every 1m (1.67% of the time), above max_duty_cycle 1%; set interval to at least 1m 41s, shorten runtime or raise max_duty_cycle",
    ),
    (
        "[defaults]\nmax_duty_cycle = 0.5\n[[targets]]\nname = \"a\"\npath = \"/x\"\nallow_writes = true\ninterval = \"1s\"\nruntime = \"300ms\"\n",
        "7:12: targets[0].interval: profiles [\"randread-4k-qd1-gentle\", \"randwrite-4k-qd1-gentle\"] run for 600ms every 1s (60.00% of the time), above max_duty_cycle 50%; set interval to at least 2s, shorten runtime or raise max_duty_cycle",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"x\"\n",
        "3:8: targets[0].path: expected an absolute path, found \"x\"",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\n[[targets]]\nname = \"a\"\npath = \"/y\"\n",
        "5:8: targets[1].name: \"a\" is used by another target; names must be unique",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\nsize = \"1 potato\"\n",
        "4:8: targets[0].size: invalid size \"1 potato\": invalid digit found in string (expected e.g. 4k, 1MiB, 1G; k/M/G are binary)",
    ),
    (
        "[[targets]]\nname = \"a\"\n",
        "1:1: targets[0]: missing field `path`",
    ),
    (
        "[profiles.mine]\nfio = \"-rw=randread -bs=4k -iodepth=16 -foo=1\"\n",
        "2:7: profiles.mine.fio: fio option \"foo\" is not supported",
    ),
    (
        "[profiles.mine]\nrw = \"randrw\"\n",
        "2:6: profiles.mine.rw: expected \"randread\", \"randwrite\", \"read\" or \"write\", found \"randrw\"",
    ),
    (
        "[profiles.mine]\nfio = \"-rw=randread\"\nbs = \"4k\"\n",
        "3:6: profiles.mine: set either fio or the explicit keys (rw, bs, iodepth, runtime, number_ios, rate_iops, fsync, fdatasync, sync, direct), not both",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\ntimeout = \"1s\"\n",
        "4:11: targets[0].timeout: timeout 1s must be longer than the runtime 1s of profile \"randread-4k-qd1-gentle\"",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\nallow_device_writes = true\n",
        "4:23: targets[0].allow_device_writes: also needs allow_writes = true (device writes are a further opt-in on top of it)",
    ),
    (
        "[profiles.randread-4k-qd1]\nrw = \"read\"\n",
        "1:11: profiles.randread-4k-qd1: \"randread-4k-qd1\" is a built-in profile; choose another name",
    ),
    (
        "[scheduler]\nmax_concurrent_probes = 0\n",
        "2:25: scheduler.max_concurrent_probes: expected a whole number from 1 to 1024, found 0",
    ),
    (
        "[defaults]\nmax_duty_cycle = 2.0\n",
        "2:18: defaults.max_duty_cycle: expected a number above 0.000001 and at most 1, found 2",
    ),
    (
        "[defaults]\nmax_duty_cycle = 1e-20\n",
        "2:18: defaults.max_duty_cycle: expected a number above 0.000001 and at most 1, found 0.00000000000000000001",
    ),
    (
        "[defaults]\ninterval = \"300000000000y\"\n",
        "2:12: defaults.interval: invalid duration \"300000000000y\": longer than 366 days (expected e.g. 500ms, 5s, 1m)",
    ),
    (
        "[profiles.fast]\nrw = \"randread\"\nbs = \"4k\"\niodepth = 1\nrate_iops = 2000000000\n",
        "5:13: profiles.fast.rate_iops: expected a whole number from 1 to 10000000, found 2000000000",
    ),
    // Durability probes (fio's fsync, fdatasync, sync and direct).
    (
        "[profiles.wal]\nrw = \"write\"\nfdatasync = -1\n",
        "3:13: profiles.wal.fdatasync: expected a whole number of writes between two syncs from 0 (none) to 4294967295, found -1",
    ),
    (
        "[profiles.wal]\nrw = \"randread\"\nfdatasync = 1\n",
        "3:13: profiles.wal.fdatasync: fdatasync applies to write profiles; a randread profile reads, and its reads stay O_DIRECT (fio ignores fdatasync on reads, a probe refuses it)",
    ),
    (
        "[profiles.wal]\nrw = \"write\"\niodepth = 4\nfdatasync = 1\n",
        "3:11: profiles.wal.iodepth: iodepth 4: profiles with fsync or fdatasync run at iodepth 1 (a sync issued while other writes are in flight makes no defined set of them durable)",
    ),
    (
        "[profiles.wal]\nrw = \"write\"\nfsync = 1\nfdatasync = 1\n",
        "4:13: profiles.wal.fdatasync: fsync and fdatasync are both set; set one",
    ),
    (
        "[profiles.wal]\nrw = \"write\"\nsync = \"always\"\n",
        "3:8: profiles.wal.sync: expected \"dsync\" (O_DSYNC), \"sync\" (O_SYNC) or \"none\", found \"always\"",
    ),
    (
        "[profiles.wal]\nrw = \"write\"\nbs = \"2300\"\ndirect = false\n",
        "4:10: profiles.wal.direct: direct = false without fsync, fdatasync or sync: buffered writes that are never synced stay in the page cache, and the probe would measure memory, not the disk",
    ),
    (
        "[profiles.wal]\nrw = \"write\"\nbs = \"2300\"\nfdatasync = 1\n",
        "3:6: profiles.wal.bs: expected a multiple of 512 bytes up to 64MiB (O_DIRECT; direct = false for buffered writes of any size), found 2300",
    ),
    (
        "[profiles.etcd]\nfio = \"--rw=write --ioengine=sync --fdatasync=1 --bs=2300\"\n",
        "2:7: profiles.etcd.fio: fio option bs=2300: O_DIRECT needs a multiple of 512 bytes; probes use O_DIRECT unless told otherwise, fio's default is buffered I/O: add -direct=0 to run this job buffered, as fio does",
    ),
    (
        "[profiles.wal]\nfio = \"-rw=write -bs=4k -fdatasync=1 -iodepth=8\"\n",
        "2:7: profiles.wal.fio: fio options: iodepth 8: profiles with fsync or fdatasync run at iodepth 1 (a sync issued while other writes are in flight makes no defined set of them durable)",
    ),
    (
        "[profiles.wal]\nfio = \"-rw=read -bs=4k -fdatasync=1\"\n",
        "2:7: profiles.wal.fio: fio options: fdatasync applies to write profiles; a read profile reads, and its reads stay O_DIRECT (fio ignores fdatasync on reads, a probe refuses it)",
    ),
    (
        "[profiles.wal]\nfio = \"-rw=write -bs=4k -fdatasync=-1\"\n",
        "2:7: profiles.wal.fio: fio option fdatasync=-1: expected a whole number of writes between two syncs (0: none)",
    ),
    (
        "[profiles.wal]\nfio = \"-rw=write -bs=4k\"\nfdatasync = 1\n",
        "3:13: profiles.wal: set either fio or the explicit keys (rw, bs, iodepth, runtime, number_ios, rate_iops, fsync, fdatasync, sync, direct), not both",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\nprofiles = [\"etcd-wal\"]\n",
        "4:13: targets[0].profiles: profile \"etcd-wal\" writes; set allow_writes = true on this target to allow writes to its probe file (block devices also need allow_device_writes = true)",
    ),
    // [[discover]] rules.
    (
        "[[discover]]\nkind = \"disk\"\n",
        "2:8: discover[0].kind: expected \"block\" or \"mount\", found \"disk\"",
    ),
    (
        "[[discover]]\nkind = \"block\"\ndevice_include = \"(\"\n",
        "3:18: discover[0].device_include: expected a regular expression, unclosed group",
    ),
    (
        "[[discover]]\nkind = \"block\"\nprofiles = [\"randread-4k-qd1\", \"randwrite-4k-qd1\"]\n",
        "3:32: discover[0].profiles: profile \"randwrite-4k-qd1\" writes; block rules are read-only (list the device under [[targets]] to write to it)",
    ),
    (
        "[[discover]]\nkind = \"block\"\ndevice_include = \"^sd\"\ndevice_exclude = \"^sda$\"\n",
        "3:18: discover[0]: device_include and device_exclude are mutually exclusive; set one",
    ),
    (
        "[[discover]]\nid = \"x\"\n",
        "1:1: discover[0]: missing field `kind`",
    ),
    (
        "[[discover]]\nkind = \"block\"\nfile = \"probe.dat\"\n",
        "3:8: discover[0].file: applies to kind = \"mount\" rules only",
    ),
    (
        "[[discover]]\nkind = \"mount\"\nfstype_include = \"^ext4$\"\n",
        "2:8: discover[0]: kind = \"mount\" needs mountpoint_include (a regular expression of mountpoints)",
    ),
    (
        "[[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/mnt/(\\\\w+)$\"\nname = \"vol-$2\"\n",
        "4:8: discover[0].name: $2 refers to capture group 2, but mountpoint_include has 1",
    ),
    (
        "[[discover]]\nkind = \"block\"\nrescan = \"500ms\"\n",
        "3:10: discover[0].rescan: expected at least 1s, found 500ms",
    ),
    (
        "[[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/mnt/\"\nfile = \"../probe.dat\"\n",
        "4:8: discover[0].file: expected a path relative to the mountpoint, without .. (e.g. \"diskprobe.dat\"), found \"../probe.dat\"",
    ),
    (
        "[[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/mnt/\"\nprofiles = [\"randwrite-4k-qd1\"]\n",
        "4:13: discover[0].profiles: profile \"randwrite-4k-qd1\" writes; a mount rule without file probes the device under each mount, read-only (set file and allow_writes = true to write a probe file inside each mount)",
    ),
    (
        "[[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/mnt/\"\nfile = \"p\"\nprofiles = [\"randwrite-4k-qd1\"]\n",
        "5:13: discover[0].profiles: profile \"randwrite-4k-qd1\" writes; set allow_writes = true in this rule to allow writes to the probe file in each mount",
    ),
    (
        "[[discover]]\nid = \"a\"\nkind = \"block\"\n[[discover]]\nid = \"a\"\nkind = \"mount\"\nmountpoint_include = \"^/x$\"\n",
        "5:6: discover[1].id: \"a\" is used by another rule; ids must be unique",
    ),
    (
        "[[discover]]\nkind = \"block\"\nname = \"{size}\"\n",
        "3:8: discover[0].name: unknown placeholder {size}; expected {kname}, {serial}, {wwn}, {volume_id}, {lun}, {cloud}, {model}, {vendor} or several of them as {wwn|serial|kname} (write {{ for a literal {)",
    ),
    (
        "[[discover]]\nkind = \"block\"\nname = \"disk-{wwn|serial|wwn}\"\n",
        "3:8: discover[0].name: {wwn|serial|wwn} lists wwn twice",
    ),
    (
        "[[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/mnt/\"\nlost_retention = \"1d\"\n",
        "4:18: discover[0].lost_retention: applies to kind = \"block\" rules only",
    ),
    (
        "[[discover]]\nkind = \"block\"\nlost_retention = \"a week\"\n",
        "3:18: discover[0].lost_retention: invalid duration \"a week\": expected number at 0 (expected e.g. 500ms, 5s, 1m)",
    ),
    (
        "[defaults]\ncohort = \"gp3 volumes\"\n",
        "2:10: defaults.cohort: expected up to 128 ASCII letters, digits, '_', '.', ':' or '-', and placeholders of the disk's facts such as {model} (\"\" for none), found \"gp3 volumes\"",
    ),
    (
        "[[discover]]\nkind = \"block\"\ncohort = \"ebs/io2\"\n",
        "3:10: discover[0].cohort: expected up to 128 ASCII letters, digits, '_', '.', ':' or '-', and placeholders of the disk's facts such as {model} (\"\" for none), found \"ebs/io2\"",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\ncohort = \"{modle}\"\n",
        "4:10: targets[0].cohort: unknown placeholder {modle}; expected {kname}, {serial}, {wwn}, {volume_id}, {lun}, {cloud}, {model}, {vendor} or several of them as {wwn|serial|kname} (write {{ for a literal {)",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\ncohort = \"ebs-$1\"\n",
        "4:10: targets[0].cohort: capture groups ($1) exist only in [[discover]] rules",
    ),
    (
        "[[discover]]\nkind = \"block\"\ndevice_include = \"^nvme(\\\\d+)n1$\"\ncohort = \"ebs-$2\"\n",
        "4:10: discover[0].cohort: $2 refers to capture group 2, but device_include has 1",
    ),
    (
        "[[discover]]\nkind = \"block\"\nmax_targets = 0\n",
        "3:15: discover[0].max_targets: expected a whole number from 1 to 4096, found 0",
    ),
    (
        "[[discover]]\nkind = \"block\"\ninterval = \"1m\"\n",
        "3:12: discover[0].interval: profiles [\"randread-4k-qd1-gentle\"] run for 1s every 1m (1.67% of the time), above max_duty_cycle 1%; set interval to at least 1m 41s, shorten runtime or raise max_duty_cycle",
    ),
    (
        "[[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/mnt/\"\nallow_writes = true\n",
        "4:16: discover[0].allow_writes: write profiles only ever write a probe file; set file too",
    ),
    (
        "[defaults]\nskip_busy_above = { iops = 10, inflight = 1 }\n",
        "2:19: defaults.skip_busy_above: unknown field `inflight`, expected one of `iops`, `in_flight`, `utilisation`",
    ),
    (
        "[defaults]\nskip_busy_above = \"busy\"\n",
        "2:19: defaults.skip_busy_above: invalid type: string \"busy\", expected a table such as { iops = 10, in_flight = 0.1 }, or a utilisation fraction",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\nskip_busy_above = { in_flight = -1 }\n",
        "4:19: targets[0].skip_busy_above.in_flight: expected a number from 0 to 1000000, found -1",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\nthroughput_limit = \"200M/s\"\n",
        "4:20: targets[0].throughput_limit: invalid throughput \"200M/s\": name the unit in full: MiB/s (binary) or MB/s (decimal), not M/s (expected e.g. 200MiB/s (binary, 2^20 bytes) or 125MB/s (decimal, 10^6 bytes))",
    ),
    (
        "[[discover]]\nkind = \"block\"\niops_limit = 0\n",
        "3:14: discover[0].iops_limit: expected a whole number of I/Os per second from 1 to 1000000000, found 0",
    ),
    (
        "[retired]\ndisks = [\"S6XNNA0R123456\", \" vol-0abc\"]\n",
        "2:28: retired.disks: expected no whitespace at the start or end of the name",
    ),
    (
        "[retired]\ndisks = [\"\"]\n",
        "2:10: retired.disks: expected a non-empty name",
    ),
    (
        "[retired]\ndisk = [\"a\"]\n",
        "2:1: retired.disk: unknown field `disk`, expected `disks`",
    ),
    (
        "[cloud_stats]\nenable = true\n",
        "2:1: cloud_stats.enable: unknown field `enable`, expected `enabled` or `size_histograms`",
    ),
    (
        "[cloud_stats]\nenabled = \"yes\"\n",
        "2:11: cloud_stats.enabled: invalid type: string \"yes\", expected a boolean",
    ),
    (
        "[limits]\niops_limit = 12800\n",
        "1:1: limits: expected devices = \"REGEX\", the kernel names of the disks the ceiling covers (e.g. \"^sd[c-z]$\")",
    ),
    (
        "[defaults]\nskip_busy_above = 1.5\n",
        "2:19: defaults.skip_busy_above.utilisation: expected a number from 0 to 1, found 1.5",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\n[[targets]]\nname = \"b\"\npath = \"/y\"\ninterval = 5\n",
        "7:12: targets[1].interval: invalid type: integer `5`, expected a string",
    ),
    (
        "[[targets]]\nname = \"a\"\npath = \"/x\"\n[[discover]]\nkind = \"block\"\n[[targets]]\npath = \"/y\"\n",
        "6:1: targets[1]: missing field `name`",
    ),
    (
        "[defaults]\nmin_free = \"lots\"\n",
        "2:12: defaults.min_free: invalid size \"lots\": invalid digit found in string (expected e.g. 4k, 1MiB, 1G; k/M/G are binary)",
    ),
    (
        "[defaults]\nyield_to_other_io = \"yes\"\n",
        "2:21: defaults.yield_to_other_io: invalid type: string \"yes\", expected a boolean",
    ),
];

fn every_bad_config_is_located() {
    for (text, expected) in BAD {
        let err = Config::from_toml(text, Path::new("bad.toml"))
            .expect_err(&format!("should be rejected:\n{text}"));
        assert_eq!(
            err.to_string(),
            format!("bad.toml:{expected}"),
            "for:\n{text}"
        );
    }
}

fn config_check_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, (text, expected)) in BAD.iter().enumerate() {
        let path = tmp.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = Command::new(common::binary())
            .arg("--config.check")
            .arg(format!("--config.file={}", path.display()))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{}:{expected}", path.display())),
            "stderr for {text:?} was {stderr}"
        );
    }
    let empty = tmp.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    for args in [
        vec!["--config.check".to_owned()],
        vec![
            "--config.check".to_owned(),
            format!("--config.file={}", empty.display()),
        ],
    ] {
        let out = Command::new(common::binary()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
    }
    let missing = Command::new(common::binary())
        .args([
            "--config.check",
            "--config.file=/nonexistent/diskprobe.toml",
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/diskprobe.toml"));
    // A listen address that does not parse is refused by the check as by a start, the flag
    // named.
    for bad in ["nonsense", "127.0.0.1:99999", "[::1"] {
        let out = Command::new(common::binary())
            .args(["--config.check", &format!("--web.listen-address={bad}")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--web.listen-address={bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--web.listen-address"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The flag that overrides [web] telemetry_path is held to the same rule.
    for bad in ["metrics", "/", "/-/reload"] {
        let out = Command::new(common::binary())
            .args(["--config.check", &format!("--web.telemetry-path={bad}")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--web.telemetry-path={bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("expected an absolute URL path"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn cohort_is_inherited_from_defaults_and_set_per_target_and_rule() {
    let config = Config::from_toml(
        "[defaults]\ncohort = \"ebs-gp3\"\n\
         [[targets]]\nname = \"a\"\npath = \"/x\"\n\
         [[targets]]\nname = \"b\"\npath = \"/y\"\ncohort = \"ebs-io2\"\n\
         [[targets]]\nname = \"c\"\npath = \"/z\"\ncohort = \"\"\n\
         [[discover]]\nkind = \"block\"\ncohort = \"nvme:local_1.0\"\n\
         [[discover]]\nkind = \"mount\"\nmountpoint_include = \"^/mnt/\"\n",
        Path::new("c.toml"),
    )
    .unwrap();
    let targets: Vec<&str> = config
        .targets
        .iter()
        .map(|t| t.settings.cohort.as_str())
        .collect();
    assert_eq!(targets, ["ebs-gp3", "ebs-io2", ""]);
    let rules: Vec<&str> = config
        .discover
        .iter()
        .map(|r| r.settings.cohort.as_str())
        .collect();
    assert_eq!(rules, ["nvme:local_1.0", "ebs-gp3"]);
    let unset = Config::from_toml(
        "[[targets]]\nname = \"a\"\npath = \"/x\"\n",
        Path::new("c.toml"),
    )
    .unwrap();
    assert_eq!(unset.targets[0].settings.cohort, "");
    let long = format!("[defaults]\ncohort = \"{}\"\n", "a".repeat(129));
    assert!(Config::from_toml(&long, Path::new("c.toml")).is_err());
    let longest = format!("[defaults]\ncohort = \"{}\"\n", "a".repeat(128));
    assert!(Config::from_toml(&longest, Path::new("c.toml")).is_ok());
}

fn example_config_loads_and_means_the_defaults() {
    let path = common::repo_root().join("config.example.toml");
    let config = Config::load(&path).expect("config.example.toml must be valid");
    assert_eq!(
        config.web.listen_address.map(|a| a.to_string()),
        Some(":9957".to_owned())
    );
    assert_eq!(config.web.telemetry_path.as_deref(), Some("/metrics"));
    assert_eq!(
        config.diskstats.filter.describe(),
        diskprobe_exporter::device_filter::DeviceFilter::default().describe()
    );
    assert_eq!(config.targets.len(), 1);
    let t = &config.targets[0];
    assert_eq!(t.name, "data");
    assert_eq!(t.settings.size, Some(1 << 30));
    let names: Vec<&str> = t
        .settings
        .profiles
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["randread-4k-qd1-gentle", "randread-4k-qd32"]);
    assert_eq!(t.settings.skip_busy_above, DEFAULT_SKIP_BUSY_ABOVE);
    assert!(t.settings.yield_to_other_io);
    assert_eq!(config.scheduler.max_concurrent_probes, 1);
    let rules: Vec<(&str, &str, &str)> = config
        .discover
        .iter()
        .map(|r| (r.id.as_str(), r.source.kind(), r.name.as_str()))
        .collect();
    assert_eq!(
        rules,
        [
            ("disks", "block", "disk-{wwn|serial|kname}"),
            ("pvcs", "mount", "pv-$1")
        ]
    );
    assert!(config.discover.iter().all(|r| {
        r.rescan == std::time::Duration::from_secs(30)
            && r.max_targets == 64
            && r.settings.profiles.iter().all(|p| !p.rw.is_write())
    }));
}

fn embedded_default_probes_a_scratch_file_with_the_gentle_profiles() {
    let config = Config::embedded_default(Path::new("/var/lib/x"));
    assert_eq!(config.targets.len(), 1);
    let t = &config.targets[0];
    assert_eq!(t.path, Path::new("/var/lib/x/probe.dat"));
    let names: Vec<&str> = t
        .settings
        .profiles
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["randread-4k-qd1-gentle", "randwrite-4k-qd1-gentle"]);
    assert!(
        t.settings
            .profiles
            .iter()
            .all(|p| p.class() == ProbeClass::Gentle)
    );
    assert!(t.settings.writes == diskprobe_exporter::config::Writes::ProbeFile);
    assert!(
        t.settings.busy_per_cycle().as_secs_f64() / t.settings.interval.as_secs_f64()
            <= t.settings.max_duty_cycle
    );
}

fn targets_without_profiles_get_the_gentle_ones_and_capacity_probes_are_opt_in() {
    let load = |text: &str| {
        Config::from_toml(text, Path::new("t.toml"))
            .unwrap()
            .targets
    };
    let names = |t: &TargetSpec| -> Vec<String> {
        t.settings.profiles.iter().map(|p| p.name.clone()).collect()
    };
    let t = load(
        "[[targets]]\nname = \"r\"\npath = \"/x\"\n\
         [[targets]]\nname = \"w\"\npath = \"/y\"\nallow_writes = true\n",
    );
    assert_eq!(names(&t[0]), ["randread-4k-qd1-gentle"]);
    assert_eq!(
        names(&t[1]),
        ["randread-4k-qd1-gentle", "randwrite-4k-qd1-gentle"]
    );
    // Busy skip and yield are on by default, with limits in I/Os rather than utilisation.
    assert_eq!(t[0].settings.skip_busy_above, DEFAULT_SKIP_BUSY_ABOVE);
    assert!(DEFAULT_SKIP_BUSY_ABOVE.iops.is_some() && DEFAULT_SKIP_BUSY_ABOVE.in_flight.is_some());
    assert!(t[0].settings.yield_to_other_io);
    // Listed capacity probes run; a target overrides the busy limits as a whole, `{}` turns
    // busy skip off, and a bare number is the utilisation limit of the key's earlier form.
    let t = load(
        "[defaults]\nprofiles = [\"randread-4k-qd32\"]\nskip_busy_above = { iops = 50 }\n\
         yield_to_other_io = false\ninterval = \"10m\"\n\
         [[targets]]\nname = \"a\"\npath = \"/x\"\n\
         [[targets]]\nname = \"b\"\npath = \"/y\"\nskip_busy_above = {}\nyield_to_other_io = true\n\
         [[targets]]\nname = \"c\"\npath = \"/z\"\nskip_busy_above = 0.5\n",
    );
    assert_eq!(names(&t[0]), ["randread-4k-qd32"]);
    assert_eq!(t[0].settings.profiles[0].class(), ProbeClass::Capacity);
    assert_eq!(
        t[0].settings.skip_busy_above,
        BusyLimits {
            iops: Some(50.0),
            in_flight: None,
            utilisation: None
        }
    );
    assert!(!t[0].settings.yield_to_other_io);
    assert!(t[1].settings.skip_busy_above.is_off() && t[1].settings.yield_to_other_io);
    assert_eq!(
        t[2].settings.skip_busy_above,
        BusyLimits {
            utilisation: Some(0.5),
            ..BusyLimits::default()
        }
    );
}

/// Write profiles on a path that is a block device need allow_device_writes at load time (not a
/// failed run later), and etcd-wal (which preallocates space in a probe file) is refused there.
/// The device node is made with mknod in a temporary directory: nothing ever opens it.
fn write_profiles_on_a_block_device_are_checked_at_load() {
    if !common::require(common::is_root(), "root (mknod of a block device node)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("disk");
    let made = Command::new("mknod")
        .arg(&node)
        .args(["b", "7", "250"])
        .status()
        .expect("run mknod");
    assert!(made.success());
    let config = |extra: &str, profile: &str| {
        format!(
            "[[targets]]\nname = \"dev\"\npath = \"{}\"\nallow_writes = true\n{extra}profiles = [\"{profile}\"]\n",
            node.display()
        )
    };
    let err = Config::from_toml(&config("", "write-4k-qd1-fdatasync"), Path::new("bad.toml"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "bad.toml:5:13: targets[0].profiles: profile \"write-4k-qd1-fdatasync\" writes and {} is a block device; set allow_device_writes = true to let probes write to it (only while it is unmounted and unused)",
            node.display()
        )
    );
    let with_opt_in = "allow_device_writes = true\n";
    let err =
        Config::from_toml(&config(with_opt_in, "etcd-wal"), Path::new("bad.toml")).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "bad.toml:6:13: targets[0].profiles: profile \"etcd-wal\" writes into space it preallocates in a probe file, and {} is a block device (write-4k-qd1-fdatasync syncs on a device)",
            node.display()
        )
    );
    let ok = Config::from_toml(
        &config(with_opt_in, "write-4k-qd1-fdatasync"),
        Path::new("ok.toml"),
    )
    .expect("a device write with the opt-in");
    assert!(ok.targets[0].settings.profiles[0].syncs());
    // A file path that does not exist yet is a probe file to be: etcd-wal is fine there.
    let file = dir.path().join("probe.dat");
    let text = format!(
        "[[targets]]\nname = \"f\"\npath = \"{}\"\nallow_writes = true\nprofiles = [\"etcd-wal\"]\n",
        file.display()
    );
    Config::from_toml(&text, Path::new("ok.toml")).expect("etcd-wal on a probe file");
}

/// A block device with write profiles (opted in) that is mounted is the machine's state, not the
/// configuration's: the configuration loads with a finding at the profile, as a run would refuse
/// the device, and `--config.check` reports it as a warning and exits 1; once unmounted, it
/// loads without one. On a loop device with an ext4 this test makes and mounts; nothing ever
/// writes to the device.
fn a_mounted_block_device_as_a_write_target_is_reported_at_load() {
    use crate::common::loopdev;
    if !loopdev::ready() {
        return;
    }
    let dev = loopdev::LoopDev::tmpfs(16 << 20);
    loopdev::mkfs(&dev, "ext4");
    let mounted = loopdev::Mount::new(&[dev.path.to_str().unwrap()]);
    let text = format!(
        "[[targets]]\nname = \"dev\"\npath = \"{}\"\nallow_writes = true\nallow_device_writes = true\nprofiles = [\"randwrite-4k-qd1\"]\n",
        dev.path.display()
    );
    let config = Config::from_toml(&text, Path::new("bad.toml")).expect("the machine's state");
    let findings: Vec<String> = config.findings.iter().map(|f| f.to_string()).collect();
    assert_eq!(
        findings,
        [format!(
            "bad.toml:6:13: targets[0].profiles: profile \"randwrite-4k-qd1\" writes and {}: the device {} ({}) is mounted; write probes need a device that is neither mounted nor in use",
            dev.path.display(),
            dev.name,
            dev.majmin()
        )]
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, &text).unwrap();
    let out = Command::new(common::binary())
        .arg("--config.check")
        .arg(format!("--config.file={}", bad.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: {}:6:13: targets[0].profiles: ",
            bad.display()
        )) && stderr.contains("is mounted"),
        "{stderr}"
    );
    // Reads of a mounted device are fine.
    let reads = text.replace("randwrite-4k-qd1", "randread-4k-qd1");
    let ok = Config::from_toml(&reads, Path::new("ok.toml")).expect("reads of a mounted device");
    assert!(ok.findings.is_empty());
    drop(mounted);
    let ok = Config::from_toml(&text, Path::new("ok.toml")).expect("an unmounted device");
    assert!(ok.findings.is_empty(), "{:?}", ok.findings);
}

/// A write target that exists as a directory, a character device or a FIFO is refused at load
/// (and by `--config.check`) at its `path`; a regular file and a path that does not exist yet are
/// probe files, and read-only profiles are not held to it.
fn write_targets_that_are_not_regular_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    let file = dir.path().join("probe.dat");
    std::fs::write(&file, b"x").unwrap();
    let config = |path: &Path, profile: &str| {
        format!(
            "[[targets]]\nname = \"w\"\npath = \"{}\"\nallow_writes = true\nprofiles = [\"{profile}\"]\n",
            path.display()
        )
    };
    let cases = [
        (dir.path().to_owned(), "a directory"),
        (Path::new("/dev/null").to_owned(), "a character device"),
        (fifo.clone(), "a FIFO"),
    ];
    for (path, what) in &cases {
        let err = Config::from_toml(&config(path, "randwrite-4k-qd1"), Path::new("bad.toml"))
            .expect_err(&format!("{} should be refused", path.display()));
        assert_eq!(
            err.to_string(),
            format!(
                "bad.toml:3:8: targets[0].path: profile \"randwrite-4k-qd1\" writes and {} is {what}; write probes need a regular file (the probe file) or a block device with allow_device_writes = true",
                path.display()
            )
        );
        // Reads are not held to it.
        Config::from_toml(&config(path, "randread-4k-qd1"), Path::new("ok.toml"))
            .unwrap_or_else(|e| panic!("a read-only profile on {}: {e}", path.display()));
    }
    for ok in [file, dir.path().join("new.dat")] {
        Config::from_toml(&config(&ok, "randwrite-4k-qd1"), Path::new("ok.toml"))
            .unwrap_or_else(|e| panic!("a probe file at {}: {e}", ok.display()));
    }
    // --config.check says the same, with the file's location, and exits 2.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, config(&fifo, "randwrite-4k-qd1")).unwrap();
    let out = Command::new(common::binary())
        .arg("--config.check")
        .arg(format!("--config.file={}", bad.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:3:8: targets[0].path: profile \"randwrite-4k-qd1\" writes and {} is a FIFO",
            bad.display(),
            fifo.display()
        )),
        "{stderr}"
    );
}

/// `min_free` (per target, or inherited from `[defaults]`) is kept free beside the 10% reserve:
/// a size whose fill would leave less than it free is reported at `min_free` (where it is set on
/// the target) by loading and by `--config.check`, as the machine's state (the configuration
/// loads, the check exits 1); a small one changes nothing.
fn min_free_is_checked_at_load_and_by_config_check() {
    let dir = tempfile::tempdir().unwrap();
    let probe = dir.path().join("probe.dat");
    let config = |where_: &str| match where_ {
        "target" => format!(
            "[[targets]]\nname = \"a\"\npath = \"{}\"\nsize = \"1MiB\"\nmin_free = \"1EiB\"\n",
            probe.display()
        ),
        "defaults" => format!(
            "[defaults]\nmin_free = \"1EiB\"\n[[targets]]\nname = \"a\"\npath = \"{}\"\nsize = \"1MiB\"\n",
            probe.display()
        ),
        _ => format!(
            "[[targets]]\nname = \"a\"\npath = \"{}\"\nsize = \"1MiB\"\nmin_free = \"4k\"\n",
            probe.display()
        ),
    };
    let finding = |text: &str| {
        let config = Config::from_toml(text, Path::new("bad.toml")).expect("the machine's state");
        assert_eq!(config.findings.len(), 1, "{:?}", config.findings);
        config.findings[0].to_string()
    };
    let found = finding(&config("target"));
    assert!(
        found.starts_with("bad.toml:5:12: targets[0].min_free: a probe file of 1048576 bytes needs 1048576 more bytes")
            && found.ends_with("would leave less than 1152921504606846976 bytes free (the larger of 10% of the filesystem and min_free)"),
        "{found}"
    );
    // Inherited: the finding points at the target's size.
    let found = finding(&config("defaults"));
    assert!(
        found.starts_with("bad.toml:6:8: targets[0].size: "),
        "{found}"
    );
    let ok = Config::from_toml(&config("small"), Path::new("ok.toml")).expect("4k can stay free");
    assert_eq!(ok.targets[0].settings.min_free, 4096);
    assert!(ok.findings.is_empty());
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, config("target")).unwrap();
    let out = Command::new(common::binary())
        .arg("--config.check")
        .arg(format!("--config.file={}", bad.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: {}:5:12: targets[0].min_free: ",
            bad.display()
        )),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "configuration is valid; the machine's state refuses targets now (1 warning(s)): exit 1"
        ),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!probe.exists());
}

/// Two targets on one file are refused at load and by `--config.check` (exit 2) at the second
/// one's `path`, whatever their sizes, naming both: one path twice, a hard link, a symbolic link,
/// a path through `..`, a file yet to be made in a directory reached through a link, and (as
/// root) a bind mount of the directory; two files are fine.
fn two_targets_on_one_file_are_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("probe.dat"), b"").unwrap();
    std::fs::hard_link(dir.join("probe.dat"), dir.join("hard.dat")).unwrap();
    std::os::unix::fs::symlink(dir.join("probe.dat"), dir.join("soft.dat")).unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(dir.join("sub"), dir.join("linked")).unwrap();
    let config = |first: &Path, second: &Path| {
        format!(
            "[[targets]]\nname = \"small\"\npath = \"{}\"\nsize = \"4MiB\"\n\
             [[targets]]\nname = \"large\"\npath = \"{}\"\nsize = \"8MiB\"\n",
            first.display(),
            second.display()
        )
    };
    let probe = dir.join("probe.dat");
    let bind = dir.join("bind");
    let bound = common::is_root().then(|| {
        std::fs::create_dir(&bind).unwrap();
        crate::common::loopdev::Mount::at(&["--bind", dir.join("sub").to_str().unwrap()], &bind)
    });
    let mut cases = vec![
        (probe.clone(), probe.clone(), "the same path".to_owned()),
        (
            probe.clone(),
            dir.join("hard.dat"),
            format!(
                "{} and {} are one file",
                probe.display(),
                dir.join("hard.dat").display()
            ),
        ),
        (
            probe.clone(),
            dir.join("soft.dat"),
            "are one file".to_owned(),
        ),
        (
            probe.clone(),
            dir.join("sub/../probe.dat"),
            "are one file".to_owned(),
        ),
        (
            dir.join("sub/new.dat"),
            dir.join("linked/new.dat"),
            "are one file".to_owned(),
        ),
    ];
    if bound.is_some() {
        cases.push((
            dir.join("sub/new.dat"),
            bind.join("new.dat"),
            "are one file".to_owned(),
        ));
    }
    for (first, second, how) in &cases {
        let err = Config::from_toml(&config(first, second), Path::new("bad.toml"))
            .expect_err(&format!("{} and {}", first.display(), second.display()))
            .to_string();
        assert!(
            err.starts_with(
                "bad.toml:7:8: targets[1].path: target \"large\" and target \"small\" (targets[0]) probe one file ("
            ) && err.contains(how.as_str())
                && err.ends_with("give \"large\" a path of its own"),
            "{err}"
        );
    }
    Config::from_toml(
        &config(&probe, &dir.join("other.dat")),
        Path::new("ok.toml"),
    )
    .expect("two files");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, config(&probe, &probe)).unwrap();
    let out = Command::new(common::binary())
        .arg("--config.check")
        .arg(format!("--config.file={}", bad.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:7:8: targets[1].path: target \"large\" and target \"small\" (targets[0]) probe one file (the same path)",
            bad.display()
        )),
        "{stderr}"
    );
    drop(bound);
}

/// The durability keys of a [profiles.NAME] table mean what fio's options of the same names mean.
fn durability_keys_mean_fios_options() {
    use diskprobe_exporter::probe::profile::{OpenSync, SyncCall, SyncEvery};
    let text = "[profiles.wal]\nrw = \"write\"\nbs = \"2300\"\nfdatasync = 1\ndirect = false\n\
                [profiles.batch]\nrw = \"randwrite\"\nfsync = 8\n\
                [profiles.dsync]\nrw = \"write\"\niodepth = 8\nsync = \"dsync\"\n\
                [profiles.pasted]\nfio = \"--rw=write --ioengine=sync --fdatasync=1 --bs=2300 --direct=0\"\n\
                [[targets]]\nname = \"f\"\npath = \"/var/lib/x/probe.dat\"\nallow_writes = true\n\
                interval = \"10m\"\nprofiles = [\"wal\", \"batch\", \"dsync\", \"pasted\", \"etcd-wal\"]\n";
    let config = Config::from_toml(text, Path::new("ok.toml")).unwrap();
    let p = &config.targets[0].settings.profiles;
    let fdatasync1 = Some(SyncEvery {
        call: SyncCall::Fdatasync,
        every: 1,
    });
    assert_eq!((p[0].block_size, p[0].durability.direct), (2300, false));
    assert_eq!(p[0].durability.sync_every, fdatasync1);
    assert_eq!(
        p[1].durability.sync_every,
        Some(SyncEvery {
            call: SyncCall::Fsync,
            every: 8
        })
    );
    assert!(p[1].durability.direct);
    assert_eq!(p[2].durability.open_sync, Some(OpenSync::Dsync));
    assert!(!p[2].syncs(), "O_DSYNC writes need no separate sync");
    // The pasted etcd job is the etcd-wal built-in but for the fresh space of its own.
    let mut pasted = p[3].clone();
    pasted.durability.fresh_space = true;
    pasted.name = "etcd-wal".to_owned();
    assert_eq!(pasted, p[4]);
}

/// `--config.check` resolves what a start resolves and does nothing a start does: no state
/// directory (the embedded default's, one `$STATE_DIRECTORY` names, one for a configuration
/// that keeps state), no probe file, no listener (an address in use passes); a state directory
/// a start refuses (the embedded default's, on tmpfs) it refuses too.
fn config_check_resolves_what_a_start_does_and_creates_nothing_and_binds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nonexistent");
    let state = missing.join("state");
    let config = tmp.path().join("keeps_state.toml");
    std::fs::write(
        &config,
        format!(
            "[[targets]]\nname = \"file\"\npath = \"{}\"\nsize = \"4MiB\"\n",
            missing.join("probe.dat").display()
        ),
    )
    .unwrap();
    let in_use = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("--web.listen-address={}", in_use.local_addr().unwrap());
    let state_flag = format!("--state.dir={}", state.display());
    let config_flag = format!("--config.file={}", config.display());
    // Mount tables where the state directory is on a disk, and in memory.
    let mount_table = |name: &str, fstype: &str| {
        let procfs = tmp.path().join(name);
        std::fs::create_dir_all(procfs.join("self")).unwrap();
        std::fs::write(
            procfs.join("self/mountinfo"),
            format!("1 0 0:1 / / rw - {fstype} {fstype} rw\n"),
        )
        .unwrap();
        format!("--path.procfs={}", procfs.display())
    };
    let on_disk = mount_table("proc_disk", "ext4");
    for (args, env_state) in [
        (vec![state_flag.as_str()], None),
        (vec![state_flag.as_str(), config_flag.as_str()], None),
        (vec![config_flag.as_str()], Some(&state)),
        (vec![], Some(&state)),
        (vec![state_flag.as_str(), address.as_str()], None),
    ] {
        let mut command = Command::new(common::binary());
        command.args(["--config.check", &on_disk]).args(&args);
        if let Some(dir) = env_state {
            command.env("STATE_DIRECTORY", dir);
        }
        let out = command.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !missing.exists(),
            "{args:?} (STATE_DIRECTORY={env_state:?}) made {}",
            missing.display()
        );
    }
    // The embedded default's state directory on a filesystem that is memory (by the mount table
    // of --path.procfs) is refused by the check as by a start, and made by neither.
    let in_memory = mount_table("proc_memory", "tmpfs");
    let refused = std::fs::canonicalize(tmp.path())
        .unwrap()
        .join("nonexistent/state");
    for extra in ["--config.check", "--web.listen-address=127.0.0.1:0"] {
        let mut child = Command::new(common::binary())
            .args([state_flag.as_str(), in_memory.as_str(), extra])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // An agent that accepted the directory would run on: stopped after 10 s.
        let exit = common::wait_exit(&mut child, std::time::Duration::from_secs(10));
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(exit.and_then(|e| e.code()), Some(2), "{extra}: {stderr}");
        assert!(
            stderr.contains(&format!("state directory {}", refused.display()))
                && stderr.contains("is on tmpfs, which is memory"),
            "{extra}: {stderr}"
        );
        assert!(!missing.exists(), "{extra} made {}", missing.display());
    }
}

crate::tests! {
    every_bad_config_is_located,
    config_check_exit_codes,
    config_check_resolves_what_a_start_does_and_creates_nothing_and_binds_nothing,
    cohort_is_inherited_from_defaults_and_set_per_target_and_rule,
    example_config_loads_and_means_the_defaults,
    embedded_default_probes_a_scratch_file_with_the_gentle_profiles,
    targets_without_profiles_get_the_gentle_ones_and_capacity_probes_are_opt_in,
    write_profiles_on_a_block_device_are_checked_at_load,
    a_mounted_block_device_as_a_write_target_is_reported_at_load: [LOOP],
    write_targets_that_are_not_regular_files_are_refused,
    min_free_is_checked_at_load_and_by_config_check,
    two_targets_on_one_file_are_refused_naming_both,
    durability_keys_mean_fios_options,
}
