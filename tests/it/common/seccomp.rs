//! The binary under a seccomp filter that fails one system call ([`binary_without_syscall`]).

use crate::common::binary;

/// Debian's python3 with its seccomp bindings (`python3-seccomp`), if installed.
pub fn python_seccomp() -> Option<&'static std::path::Path> {
    let python = std::path::Path::new("/usr/bin/python3");
    let found = python.exists()
        && std::process::Command::new(python)
            .args(["-c", "import seccomp"])
            .status()
            .is_ok_and(|s| s.success());
    found.then_some(python)
}

/// A command that runs the binary under a seccomp filter failing `syscall` with `errno` (a name
/// of Python's `errno` module, e.g. `EPERM`): a python3 wrapper written to `dir` loads the filter
/// and then executes the binary. Arguments added to the command go to the binary.
pub fn binary_without_syscall(
    python: &std::path::Path,
    dir: &std::path::Path,
    syscall: &str,
    errno: &str,
) -> std::process::Command {
    let wrapper = dir.join(format!("without_{syscall}.py"));
    std::fs::write(
        &wrapper,
        format!(
            "import errno, os, sys, seccomp\n\
             f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)\n\
             f.add_rule(seccomp.ERRNO(errno.{errno}), '{syscall}')\n\
             f.load()\n\
             os.execv(sys.argv[1], sys.argv[1:])\n"
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(python);
    cmd.arg(wrapper).arg(binary());
    cmd
}
