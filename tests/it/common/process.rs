//! What /proc says of one process, by its PID: its threads, its io_uring instances and the files
//! registered in them, numbers from its status. Tests ask about the process they started (an
//! agent's [`Agent::pid`](crate::common::Agent::pid)), or about the test binary itself only for
//! what no other test of the binary can have made (a file of the test's own), never about names
//! any test's threads share.

use std::path::Path;

/// `anon_inode:[io_uring]` descriptors of process `pid`: its io_uring instances.
pub fn io_uring_fds(pid: u32) -> usize {
    rings(pid).len()
}

/// The `/proc/PID/fdinfo` text of each io_uring instance of process `pid`.
fn rings(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:[io_uring]")
        })
        .filter_map(|e| {
            std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", e.file_name().display())).ok()
        })
        .collect()
}

/// Whether an io_uring instance of process `pid` has `file` registered (its fdinfo lists the
/// registered files by path under `UserFiles:`): the io_uring engine runs on it.
pub fn ring_has_file(pid: u32, file: &Path) -> bool {
    rings(pid).iter().any(|info| {
        info.lines()
            .skip_while(|l| !l.starts_with("UserFiles:"))
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .any(|l| {
                l.split_once(": ")
                    .is_some_and(|(_, p)| Path::new(p) == file)
            })
    })
}

/// Descriptors of process `pid` open on `file`.
pub fn fds_on(pid: u32, file: &Path) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == file))
                .count()
        })
        .unwrap_or(0)
}

/// Whether a probe engine of process `pid` is running on `file`: an io_uring instance has it
/// registered, or a psync worker holds its own duplicate of the target's descriptor beside the
/// target's (two descriptors or more; opening and filling the file holds one).
pub fn engine_runs_on(pid: u32, file: &Path) -> bool {
    ring_has_file(pid, file) || fds_on(pid, file) >= 2
}

/// Threads of process `pid` whose name (`comm`, at most 15 bytes) is `name`.
pub fn threads_named(pid: u32, name: &str) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name)
                })
                .filter_map(|t| t.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A number from `/proc/PID/status` (`Threads:`, `VmRSS:` in KiB).
pub fn status(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}
