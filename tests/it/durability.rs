//! Durability probes (fsync / fdatasync profiles) against what the kernel and the filesystem see:
//! - ground truth on a raw loop device: the writes and syncs a run reports are the device's own
//!   count of writes and flush requests in `/proc/diskstats`, on both engines;
//! - `etcd-wal` writes etcd's job into space it preallocates for each run: as many 2300-byte
//!   writes as that space holds, one sync each, and the probe file is left as it was;
//! - the agent running `etcd-wal` on a file in an ext4 volume: the sync histogram counts every
//!   sync (one per write), every sync reached the device, and nothing outside the probe file
//!   changes (nor inside its pre-filled region).

use crate::common;
use crate::common::loopdev;

use common::{Agent, one_shot_run, shared, sum, tree, wait_until};
use loopdev::{LoopDev, Mount, mkfs};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn count(run: &Value, key: &str) -> u64 {
    run[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {run}"))
}

/// On a loop device over a tmpfs file (it has a write-back cache, so the block layer passes
/// flushes to the driver, which syncs its backing file): each sync of an O_DIRECT write profile is
/// one flush request in the device's diskstats. The kernel submits a flush as an empty write
/// carrying REQ_PREFLUSH (blkdev_issue_flush), which diskstats counts as a write of 0 sectors and,
/// in the flush machinery, as a flush: so writes completed = writes + syncs, sectors written =
/// writes x 8, flushes completed = syncs, exactly.
fn syncs_are_the_devices_flushes() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let cache = std::fs::read_to_string(format!("/sys/block/{}/queue/write_cache", dev.name))
        .expect("write_cache");
    assert_eq!(
        cache.trim(),
        "write back",
        "the loop device must pass flushes"
    );
    let path = dev.path.to_str().unwrap();
    for engine in ["io_uring", "psync"] {
        for (what, profile_args, every) in [
            (
                "write-4k-qd1-fdatasync",
                vec!["--profile", "write-4k-qd1-fdatasync"],
                1,
            ),
            ("fsync=4", vec!["--fio", "-rw=randwrite -bs=4k -fsync=4"], 4),
        ] {
            wait_unclaimed(&dev);
            let before = dev.stats();
            let mut args = vec!["--target", path, "--allow-writes", "--engine", engine];
            // Long enough for 20 synced writes on a loaded machine (11 in 300 ms were seen).
            args.extend(["--runtime", "1s"]);
            args.extend(&profile_args);
            let run = one_shot_run(&args);
            let after = dev.stats();
            assert_eq!(run["engine"], engine, "{run}");
            assert!(run["error"].is_null(), "{engine} {what}: {run}");
            let (writes, syncs) = (count(&run, "ios"), count(&run, "syncs"));
            eprintln!(
                "{engine} {what}: writes {writes} syncs {syncs}; diskstats writes +{} sectors +{} flushes +{}",
                after.writes - before.writes,
                after.write_sectors - before.write_sectors,
                after.flushes - before.flushes
            );
            assert!(writes >= 20, "{engine} {what}: only {writes} writes");
            // A sync after every `every`-th write, none after a last incomplete batch (as fio).
            assert_eq!(syncs, writes / every, "{engine} {what}");
            assert_eq!(
                after.flushes - before.flushes,
                syncs,
                "{engine} {what}: flushes"
            );
            assert_eq!(
                after.writes - before.writes,
                writes + syncs,
                "{engine} {what}: writes completed (the data writes and each flush's empty write)"
            );
            assert_eq!(after.write_merges, before.write_merges, "{engine} {what}");
            assert_eq!(
                after.write_sectors - before.write_sectors,
                writes * 8,
                "{engine} {what}: sectors"
            );
            let sync = &run["sync_latency_seconds"];
            assert!(sync["p50"].as_f64().is_some_and(|x| x > 0.0), "{run}");
        }
        // Without a separate sync there are no sync figures.
        wait_unclaimed(&dev);
        let run = one_shot_run(&[
            "--target",
            path,
            "--allow-writes",
            "--engine",
            engine,
            "--runtime",
            "100ms",
            "--profile",
            "randwrite-4k-qd1",
        ]);
        assert!(
            run["syncs"].is_null() && run["sync_latency_seconds"].is_null(),
            "{run}"
        );
    }
}

/// Waits until nobody holds an exclusive claim on `dev`: the io_uring engine's ring, with the
/// device registered in it, is torn down by the kernel shortly after the one-shot process exits,
/// and until then the next write run's `O_EXCL` open is refused.
fn wait_unclaimed(dev: &LoopDev) {
    use std::os::unix::fs::OpenOptionsExt;
    let open = || {
        let open = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&dev.path);
        if let Err(err) = &open {
            assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{err}");
        }
        open
    };
    if let Err(err) = common::wait::poll(Duration::from_secs(10), common::wait::INTERVAL, open) {
        panic!("{} still claimed after 10 s: {err}", dev.path.display());
    }
}

/// `st_blocks` × 512 of a file: the space it holds.
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// etcd's job bounded by its size: `etcd-wal` with `--size 1m` writes 1 MiB / 2300 bytes = 455
/// writes into the space it preallocates beyond the region, syncs each, and releases the space:
/// the probe file keeps its size, its blocks and its content.
fn etcd_wal_writes_its_own_fresh_space_and_gives_it_back() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let dev = LoopDev::tmpfs(64 << 20);
    mkfs(&dev, "ext4");
    let volume = Mount::new(&[dev.path.to_str().unwrap()]);
    let file = volume.path().join("probe.dat");
    let file_arg = file.to_str().unwrap();
    // Creates and fills the probe file (a read run).
    one_shot_run(&[
        "--target",
        file_arg,
        "--size",
        "1m",
        "--runtime",
        "50ms",
        "--profile",
        "randread-4k-qd1",
    ]);
    let (content, blocks) = (std::fs::read(&file).unwrap(), allocated(&file));
    assert_eq!(content.len(), 1 << 20);
    for engine in ["io_uring", "psync"] {
        let before = dev.stats();
        let run = one_shot_run(&[
            "--target",
            file_arg,
            "--size",
            "1m",
            "--allow-writes",
            "--engine",
            engine,
            "--runtime",
            "60s",
            "--profile",
            "etcd-wal",
        ]);
        let after = dev.stats();
        assert!(run["error"].is_null(), "{engine}: {run}");
        assert_eq!(
            (run["block_size"].as_u64(), run["iodepth"].as_u64()),
            (Some(2300), Some(1))
        );
        assert_eq!(count(&run, "ios"), (1 << 20) / 2300, "{engine}: {run}");
        assert_eq!(count(&run, "syncs"), count(&run, "ios"), "{engine}");
        assert!(
            run["elapsed_seconds"].as_f64().unwrap() < 50.0,
            "{engine}: the full space, not the runtime, ended the run"
        );
        // Every fdatasync reached the device as at least one flush (ext4 commits the extent
        // conversion with a flush, or flushes the device cache itself).
        assert!(
            after.flushes - before.flushes >= count(&run, "syncs"),
            "{engine}: {} flushes for {} syncs",
            after.flushes - before.flushes,
            count(&run, "syncs")
        );
        assert_eq!(
            std::fs::read(&file).unwrap(),
            content,
            "{engine}: the region"
        );
        assert_eq!(
            allocated(&file),
            blocks,
            "{engine}: the space is given back"
        );
    }
}

/// The agent runs `etcd-wal` on a probe file in an ext4 volume that holds other data, on both
/// engines: the sync histogram counts exactly the syncs issued (one per write, so its count is
/// also `diskprobe_ios_total`), the device saw at least one flush per sync, and when the agent
/// stops, nothing in the volume but the probe file has changed, the probe file not at all (its
/// pre-filled region is never written by `etcd-wal`), and the volume's free space is as before.
fn the_agent_counts_every_sync_of_etcd_wal_and_changes_nothing_else() {
    if !loopdev::ready() {
        return;
    }
    let _guard = shared();
    let dev = LoopDev::tmpfs(64 << 20);
    mkfs(&dev, "ext4");
    let volume = Mount::new(&[dev.path.to_str().unwrap()]);
    std::fs::create_dir(volume.path().join("member")).unwrap();
    std::fs::write(
        volume.path().join("member/snap.db"),
        &dev.content()[..1 << 20],
    )
    .unwrap();
    std::fs::write(volume.path().join("notes.txt"), "users' data\n").unwrap();
    let files: Vec<PathBuf> = ["uring.dat", "psync.dat"]
        .iter()
        .map(|f| volume.path().join(f))
        .collect();
    for f in &files {
        one_shot_run(&[
            "--target",
            f.to_str().unwrap(),
            "--size",
            "4m",
            "--runtime",
            "50ms",
            "--profile",
            "randread-4k-qd1",
        ]);
    }
    let before = tree(volume.path());
    let free_before = free_bytes(volume.path());
    let flushes_before = dev.stats().flushes;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    let target = |name: &str, path: &Path, engine: &str| {
        format!(
            "[[targets]]\nname = \"{name}\"\npath = \"{}\"\nsize = \"4MiB\"\nallow_writes = true\n\
             engine = \"{engine}\"\nprofiles = [\"etcd-wal\"]\n",
            path.display()
        )
    };
    std::fs::write(
        &config,
        format!(
            "[defaults]\ninterval = \"500ms\"\nruntime = \"100ms\"\ntimeout = \"10s\"\n\
             max_duty_cycle = 0.5\n{}{}",
            target("etcd-uring", &files[0], "io_uring"),
            target("etcd-psync", &files[1], "psync")
        ),
    )
    .unwrap();
    let mut agent = Agent::start(&[&format!("--config.file={}", config.display())]);
    // A run is recorded at once (counters and histograms together), so any scrape is consistent.
    let m = wait_until(
        &agent,
        Duration::from_secs(60),
        "three runs of each target",
        |m| {
            ["etcd-uring", "etcd-psync"]
                .iter()
                .all(|t| common::runs(m, t, "success") >= 3.0)
        },
    );
    let mut recorded = 0.0;
    for t in ["etcd-uring", "etcd-psync"] {
        let t = format!("target=\"{t}\"");
        let syncs = sum(&m, "diskprobe_syncs_total", &[&t]);
        let writes = sum(&m, "diskprobe_ios_total", &[&t]);
        assert!(syncs >= 3.0, "{t}: {syncs} syncs");
        assert_eq!(
            sum(&m, "diskprobe_sync_latency_seconds_count", &[&t]),
            syncs,
            "{t}: sync histogram count"
        );
        assert_eq!(
            sum(
                &m,
                "diskprobe_sync_latency_seconds_bucket",
                &[&t, "le=\"+Inf\""]
            ),
            syncs,
            "{t}: +Inf bucket"
        );
        assert_eq!(writes, syncs, "{t}: one fdatasync per write");
        assert!(sum(&m, "diskprobe_sync_latency_seconds_sum", &[&t]) > 0.0);
        eprintln!("{t}: {writes} writes, {syncs} syncs");
        for stat in ["p50", "p99", "max"] {
            let v = sum(
                &m,
                "diskprobe_probe_sync_latency_seconds",
                &[&t, &format!("stat=\"{stat}\"")],
            );
            assert!(v > 0.0, "{t}: sync {stat} {v}");
        }
        recorded += syncs;
    }
    agent.terminate();
    // Every sync the agent recorded reached the device (runs after that scrape only add more).
    let flushes = dev.stats().flushes - flushes_before;
    eprintln!("the device completed {flushes} flushes");
    assert!(
        flushes as f64 >= recorded,
        "{flushes} flushes for {recorded} syncs"
    );
    assert_eq!(
        tree(volume.path()),
        before,
        "the volume's files, the probe files included"
    );
    assert_eq!(
        free_bytes(volume.path()),
        free_before,
        "the volume's free space"
    );
}

/// Free bytes of the filesystem at `path` (`statvfs`), once what it holds is committed
/// (`sync -f`: blocks freed by a truncate count as free after the journal commit).
fn free_bytes(path: &Path) -> u64 {
    let synced = Command::new("sync").arg("-f").arg(path).status();
    assert!(
        synced.is_ok_and(|s| s.success()),
        "sync -f {}",
        path.display()
    );
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a live, writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    assert_eq!(rc, 0);
    st.f_bfree * st.f_frsize
}

crate::tests! {
    syncs_are_the_devices_flushes: [LOOP],
    etcd_wal_writes_its_own_fresh_space_and_gives_it_back: [LOOP],
    the_agent_counts_every_sync_of_etcd_wal_and_changes_nothing_else: [LOOP],
}
