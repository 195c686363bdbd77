//! NVMe admin commands, sent with the kernel's `NVME_IOCTL_ADMIN_CMD` on an open NVMe device
//! node (a namespace `/dev/nvme0n1` or a controller `/dev/nvme0`): Identify (opcode 0x06) now,
//! Get Log Page (opcode 0x02, for EC2's performance statistics log 0xD0, read by
//! [`crate::cloud_stats`]) through the same [`admin`] call.
//!
//! The kernel asks for `CAP_SYS_ADMIN` for admin commands: without it, and on a device that is
//! not NVMe, a command fails with an [`AdminError`] that says so ([`AdminError::PermissionDenied`],
//! [`AdminError::NotNvme`], each with the kernel's errno), so that callers degrade to what sysfs
//! says. [`has_cap_sys_admin`] asks the kernel (`capget`) before a caller sends its first
//! command. The only `unsafe` of this module is the ioctl. What identify data says of a cloud's
//! disk is [`crate::blockdev::cloud`]'s to read.

use std::fs::File;
use std::os::fd::AsRawFd;

/// `_IOWR('N', 0x41, struct nvme_admin_cmd)`: 72 bytes of command.
const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = 0xC048_4E41;

/// Identify.
pub(crate) const OPCODE_IDENTIFY: u8 = 0x06;
/// Get Log Page.
pub(crate) const OPCODE_GET_LOG_PAGE: u8 = 0x02;
/// What an Identify returns.
pub(crate) const IDENTIFY_LEN: usize = 4096;

/// The kernel's `struct nvme_admin_cmd` (`linux/nvme_ioctl.h`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct RawCommand {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

const _: () = assert!(std::mem::size_of::<RawCommand>() == 72);

/// An admin command that reads data from the controller into a buffer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AdminCommand {
    /// The opcode ([`OPCODE_IDENTIFY`], [`OPCODE_GET_LOG_PAGE`]).
    pub opcode: u8,
    /// The namespace (0: none; `0xFFFF_FFFF`: all).
    pub nsid: u32,
    /// Command dwords 10 to 15.
    pub cdw: [u32; 6],
    /// How long the controller may take, in milliseconds (0: the kernel's default).
    pub timeout_ms: u32,
}

impl AdminCommand {
    /// Identify Namespace `nsid` (CNS 0).
    pub(crate) fn identify_namespace(nsid: u32) -> AdminCommand {
        AdminCommand {
            opcode: OPCODE_IDENTIFY,
            nsid,
            ..AdminCommand::default()
        }
    }

    /// Get Log Page `log_id` of `len` bytes (a multiple of 4) for namespace `nsid`: the number
    /// of dwords less one goes into CDW10 (low 16 bits, above the log id) and CDW11.
    pub(crate) fn get_log_page(nsid: u32, log_id: u8, len: usize) -> AdminCommand {
        let numd = (len / 4).saturating_sub(1) as u32;
        AdminCommand {
            opcode: OPCODE_GET_LOG_PAGE,
            nsid,
            cdw: [
                ((numd & 0xFFFF) << 16) | u32::from(log_id),
                numd >> 16,
                0,
                0,
                0,
                0,
            ],
            ..AdminCommand::default()
        }
    }
}

/// Why an admin command gave no data.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AdminError {
    /// The agent lacks `CAP_SYS_ADMIN`, or Landlock refuses the ioctl (EACCES, EPERM: the errno).
    #[error("NVMe admin commands need CAP_SYS_ADMIN (errno {0})")]
    PermissionDenied(i32),
    /// The file is no NVMe device (ENOTTY, EINVAL: the errno; a loop device answers EINVAL).
    #[error("not an NVMe device (errno {0})")]
    NotNvme(i32),
    /// The controller answered with an NVMe status.
    #[error("NVMe status {0:#x}")]
    Status(u32),
    /// Any other failure of the ioctl.
    #[error("NVMe admin command failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Sends `cmd` on `device`, reading its data into `buf`; the command's result dword.
pub(crate) fn admin(device: &File, cmd: &AdminCommand, buf: &mut [u8]) -> Result<u32, AdminError> {
    let data_len = u32::try_from(buf.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "buffer over 4 GiB"))?;
    let mut raw = RawCommand {
        opcode: cmd.opcode,
        nsid: cmd.nsid,
        addr: buf.as_mut_ptr() as u64,
        data_len,
        cdw10: cmd.cdw[0],
        cdw11: cmd.cdw[1],
        cdw12: cmd.cdw[2],
        cdw13: cmd.cdw[3],
        cdw14: cmd.cdw[4],
        cdw15: cmd.cdw[5],
        timeout_ms: cmd.timeout_ms,
        ..RawCommand::default()
    };
    // SAFETY: `raw` is a live, properly laid out `struct nvme_admin_cmd` (72 bytes, checked at
    // compile time) that the kernel reads and writes back (its `result`) during the call only;
    // `addr` and `data_len` describe `buf`, which is borrowed mutably for the whole call, so the
    // kernel's write of at most `data_len` bytes lands inside it; the fd is open for the call.
    let rc = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            NVME_IOCTL_ADMIN_CMD as _,
            std::ptr::addr_of_mut!(raw),
        )
    };
    match rc {
        0 => Ok(raw.result),
        rc if rc > 0 => Err(AdminError::Status(rc as u32)),
        _ => Err(classify(std::io::Error::last_os_error())),
    }
}

fn classify(err: std::io::Error) -> AdminError {
    match err.raw_os_error() {
        Some(e @ (libc::EACCES | libc::EPERM)) => AdminError::PermissionDenied(e),
        Some(e @ (libc::ENOTTY | libc::EINVAL)) => AdminError::NotNvme(e),
        _ => AdminError::Io(err),
    }
}

impl AdminError {
    /// The kernel's errno, where the ioctl failed with one.
    pub(crate) fn errno(&self) -> Option<i32> {
        match self {
            AdminError::PermissionDenied(e) | AdminError::NotNvme(e) => Some(*e),
            AdminError::Io(err) => err.raw_os_error(),
            AdminError::Status(_) => None,
        }
    }
}

/// Whether this thread's effective capabilities hold `CAP_SYS_ADMIN`, which the kernel asks of
/// every NVMe admin command (`capget(2)` on the calling thread, through the `caps` crate).
pub(crate) fn has_cap_sys_admin() -> std::io::Result<bool> {
    caps::has_cap(
        None,
        caps::CapSet::Effective,
        caps::Capability::CAP_SYS_ADMIN,
    )
    .map_err(|e| std::io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_encoded_as_the_spec_says() {
        assert_eq!(AdminCommand::identify_namespace(3).nsid, 3);
        // EBS statistics: log 0xD0, 4096 bytes: 1023 dwords less one... in the upper half.
        let log = AdminCommand::get_log_page(1, 0xD0, 4096);
        assert_eq!(log.opcode, OPCODE_GET_LOG_PAGE);
        assert_eq!(log.cdw[0], (1023 << 16) | 0xD0);
        assert_eq!(log.cdw[1], 0);
    }

    #[test]
    fn a_file_that_is_no_nvme_device_says_so() {
        let file = File::open("/dev/null").unwrap();
        let mut buf = vec![0u8; IDENTIFY_LEN];
        let err = admin(&file, &AdminCommand::identify_namespace(1), &mut buf).unwrap_err();
        assert!(
            matches!(
                err,
                AdminError::NotNvme(_) | AdminError::PermissionDenied(_)
            ),
            "{err}"
        );
        assert!(matches!(
            classify(std::io::Error::from_raw_os_error(libc::EACCES)),
            AdminError::PermissionDenied(libc::EACCES)
        ));
        assert!(matches!(
            classify(std::io::Error::from_raw_os_error(libc::ENOTTY)),
            AdminError::NotNvme(libc::ENOTTY)
        ));
        let einval = classify(std::io::Error::from_raw_os_error(libc::EINVAL));
        assert_eq!(einval.errno(), Some(libc::EINVAL));
        assert_eq!(AdminError::Status(2).errno(), None);
    }

    #[test]
    fn capget_agrees_with_proc_status() {
        // CapEff in /proc/thread-self/status is the same set the kernel reports through capget.
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        assert_eq!(
            has_cap_sys_admin().unwrap(),
            eff & (1 << 21) != 0, // CAP_SYS_ADMIN (linux/capability.h)
        );
    }
}
