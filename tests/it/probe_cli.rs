//! The one-shot `diskprobe_exporter probe` command, run as a real process.

use crate::common;
use crate::common::loopdev;

use loopdev::LoopDev;
use std::process::Command;

fn probe(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(common::binary())
        .arg("probe")
        .args(args)
        .output()
        .expect("run the binary");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_has_the_contract_fields_for_each_builtin_read_profile() {
    if !loopdev::ready() {
        return;
    }
    let _g = common::shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let path = dev.path.to_string_lossy().into_owned();
    let runs = common::one_shot(&["--target", &path, "--runtime", "300ms"]);
    let names: Vec<&str> = runs
        .iter()
        .map(|r| r["profile"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["randread-4k-qd1", "randread-4k-qd32", "read-1m-qd16"]
    );
    for r in runs {
        for key in [
            "target",
            "device",
            "profile",
            "rw",
            "block_size",
            "iodepth",
            "engine",
            "ios",
            "bytes",
            "elapsed_seconds",
            "iops",
            "bandwidth_bytes_per_second",
            "latency_seconds",
            "error",
        ] {
            assert!(r.get(key).is_some(), "missing {key}: {r}");
        }
        for key in ["min", "mean", "max", "p50", "p90", "p99", "p999", "p9999"] {
            assert!(
                r["latency_seconds"][key].as_f64().unwrap() > 0.0,
                "{key}: {r}"
            );
        }
        assert!(r["error"].is_null());
        assert_eq!(r["device"], dev.name.as_str());
        assert_eq!(r["engine"], "io_uring");
        let ios = r["ios"].as_u64().unwrap();
        assert_eq!(
            r["bytes"].as_u64().unwrap(),
            ios * r["block_size"].as_u64().unwrap()
        );
        let iops = r["iops"].as_f64().unwrap();
        let expect = ios as f64 / r["elapsed_seconds"].as_f64().unwrap();
        assert!((iops - expect).abs() < 1e-6 * expect);
    }
}

fn every_builtin_runs_and_writes_need_allow_writes() {
    if !loopdev::ready() {
        return;
    }
    let _g = common::shared();
    let dev = LoopDev::tmpfs(64 << 20);
    let path = dev.path.to_string_lossy().into_owned();
    let (code, _, stderr) = probe(&["--target", &path, "--profile", "randwrite-4k-qd1"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--allow-writes"), "{stderr}");

    let builtins = [
        "randread-4k-qd1",
        "randread-4k-qd32",
        "randread-4k-qd128",
        "read-1m-qd16",
        "read-1m-qd64",
        "randwrite-4k-qd1",
        "randwrite-4k-qd32",
        "randwrite-4k-qd128",
        "write-1m-qd16",
        "write-1m-qd64",
    ];
    let mut args = vec![
        "--target",
        path.as_str(),
        "--runtime",
        "200ms",
        "--allow-writes",
    ];
    for b in builtins {
        args.extend(["--profile", b]);
    }
    let (code, stdout, stderr) = probe(&args);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for b in builtins {
        assert!(
            stdout.contains(&format!("{b}: (rw=")),
            "{b} missing in\n{stdout}"
        );
    }
    assert!(stdout.contains("IOPS=") && stdout.contains("lat percentiles (usec)"));
}

fn usage_errors_and_failed_runs_exit_non_zero() {
    let (code, _, stderr) = probe(&["--target", "/nonexistent/x", "--profile", "nope"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("unknown profile \"nope\""), "{stderr}");
    let (code, _, stderr) = probe(&["--target", "/nonexistent/x", "--fio", "-rw=randrw -bs=4k"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("rw=randrw"), "{stderr}");
    let (code, stdout, _) = probe(&["--target", "/nonexistent/dir/probe.dat", "--format", "json"]);
    assert_eq!(code, Some(1));
    let runs: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    assert!(
        runs[0]["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/dir/probe.dat")
    );
}

fn tmpfs_probe_file_is_created_and_warned_about() {
    let _g = common::shared();
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir on tmpfs");
    let file = dir.path().join("probe.dat");
    let path = file.to_string_lossy().into_owned();
    let (code, stdout, stderr) = probe(&[
        "--target",
        &path,
        "--size",
        "16MiB",
        "--profile",
        "randread-4k-qd1",
        "--runtime",
        "200ms",
        "--format",
        "json",
    ]);
    if stderr.contains("O_DIRECT is not supported") {
        // Kernels before 6.6 have no O_DIRECT on tmpfs: that is the refusal we want.
        assert_eq!(code, Some(1));
        return;
    }
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 16 << 20);
    let runs: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    assert_eq!(runs[0]["fstype"], "tmpfs");
    assert!(
        runs[0]["warnings"][0].as_str().unwrap().contains("tmpfs"),
        "{stdout}"
    );
}

/// Threads (tasks) of every process whose real user is `uid`: what RLIMIT_NPROC counts.
fn tasks_of_user(uid: u32) -> u64 {
    let uid = uid.to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1))
                == Some(uid.as_str())
        })
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("Threads:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

fn psync_refuses_to_run_short_of_its_depth() {
    let tools = common::which("prlimit").zip(common::which("setpriv"));
    if !common::require(common::is_root(), "root")
        || !common::require(tools.is_some(), "prlimit and setpriv (util-linux)")
    {
        return;
    }
    let Some((prlimit, setpriv)) = tools else {
        return;
    };
    // The limit counts the threads of every process of the user: no other test may start or
    // end one meanwhile (faults' EACCES agent runs as the same user).
    let _g = common::exclusive();
    // A file the unprivileged user may read, probed at QD32 by psync under a process limit that
    // lets it start a few threads but not 32: the kernel refuses the rest (EAGAIN).
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let file = dir.path().join("data");
    std::fs::write(&file, vec![7u8; 4 << 20]).unwrap();
    let limit = tasks_of_user(65534) + 6;
    let out = Command::new(prlimit)
        .arg(format!("--nproc={limit}:{limit}"))
        .arg(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::binary())
        .args([
            "probe",
            "--engine",
            "psync",
            "--format",
            "json",
            "--runtime",
            "200ms",
        ])
        .arg("--target")
        .arg(&file)
        .args(["--fio", "-rw=randread -bs=4k -iodepth=32"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let runs: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|err| panic!("{err}: {stdout}{}", String::from_utf8_lossy(&out.stderr)));
    let run = &runs[0];
    assert_eq!(out.status.code(), Some(1), "{run}");
    let error = run["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("of the 32 threads its queue depth needs"),
        "{run}"
    );
    assert_eq!(run["ios"], 0, "no I/O at a lower depth: {run}");
}

crate::tests! {
    json_has_the_contract_fields_for_each_builtin_read_profile: [LOOP],
    every_builtin_runs_and_writes_need_allow_writes: [LOOP],
    usage_errors_and_failed_runs_exit_non_zero,
    tmpfs_probe_file_is_created_and_warned_about,
    psync_refuses_to_run_short_of_its_depth,
}
