//! What the cloud says about its disks: EC2's NVMe performance statistics (log page 0xD0) of
//! EBS volumes and instance-store devices, which devices have them ([`source_of`]), how a page
//! is read ([`Pages`]: from the device with an NVMe Get Log Page admin command, or from files
//! for fixtures) and why one could not be ([`Failure`], whose `reason` the collector exports).
//!
//! - [`page`]: the page's layout, a pure parser.
//!
//! Reading from a device: the capability is checked first (`capget`: without `CAP_SYS_ADMIN`
//! the kernel refuses every admin command with EACCES), the node `<devfs>/<kernel name>` is
//! opened read-only and must be the block device sysfs names (its major:minor), and the command
//! asks for the page's length (4096 bytes EBS, 8192 instance store) on the namespace's id.
//! The collector ([`crate::collectors::cloud_metrics`]) reads each device at most once a second.

pub(crate) mod page;

use crate::blockdev::cloud::{EBS_MODEL, INSTANCE_STORE_MODEL};
use crate::blockdev::{BlockDevice, Kind};
use crate::nvme_admin::{self, AdminCommand, AdminError};
pub(crate) use page::{LogPage, PageError, Source};
use std::fmt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

/// How long the controller may take to answer, in milliseconds.
pub(crate) const COMMAND_TIMEOUT_MS: u32 = 2000;

/// Which page a device serves, by its model (as [`crate::blockdev::cloud`] names them): only
/// whole NVMe namespaces of EBS or instance store are asked; every other device is not.
pub(crate) fn source_of(device: &BlockDevice) -> Option<Source> {
    if device.kind != Some(Kind::Disk) || device.nsid.is_none() {
        return None;
    }
    match device.model.as_str() {
        EBS_MODEL => Some(Source::Ebs),
        INSTANCE_STORE_MODEL => Some(Source::InstanceStore),
        _ => None,
    }
}

/// Why a device's page could not be had: a `reason` label and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// `no_cap_sys_admin`, `capget_failed`, `open_failed`, `wrong_device`, `eacces`, `eperm`,
    /// `einval`, `enotty`, `nvme_status`, `ioctl_failed`, `short_page`, `unknown_magic`,
    /// `unknown_version` or `malformed_page`.
    pub reason: &'static str,
    /// What happened, for the log line.
    pub detail: String,
}

impl Failure {
    fn new(reason: &'static str, detail: impl Into<String>) -> Failure {
        Failure {
            reason,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.detail, self.reason)
    }
}

impl From<PageError> for Failure {
    fn from(err: PageError) -> Failure {
        Failure::new(err.reason(), err.to_string())
    }
}

/// Where pages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pages {
    /// From each device: `<devfs>/<kernel name>` (`--path.devfs`).
    Devices {
        /// The device directory.
        devfs: PathBuf,
    },
    /// From files `<dir>/<kernel name>` holding the page's bytes (`--path.cloud-stats-pages`:
    /// fixtures, as node_exporter reads its fixtures through its path flags).
    Files {
        /// The directory.
        dir: PathBuf,
    },
}

impl Pages {
    /// The bytes of `device`'s page, which is a `source` page.
    pub(crate) fn read(&self, device: &BlockDevice, source: Source) -> Result<Vec<u8>, Failure> {
        match self {
            Pages::Files { dir } => {
                let path = dir.join(&device.kname);
                std::fs::read(&path)
                    .map_err(|e| Failure::new("open_failed", format!("{}: {e}", path.display())))
            }
            Pages::Devices { devfs } => from_device(devfs.join(&device.kname), device, source),
        }
    }

    /// [`Pages::read`] and [`page::parse`].
    pub(crate) fn read_page(
        &self,
        device: &BlockDevice,
        source: Source,
    ) -> Result<LogPage, Failure> {
        Ok(page::parse(&self.read(device, source)?)?)
    }
}

fn from_device(node: PathBuf, device: &BlockDevice, source: Source) -> Result<Vec<u8>, Failure> {
    match nvme_admin::has_cap_sys_admin() {
        Ok(true) => {}
        Ok(false) => {
            return Err(Failure::new(
                "no_cap_sys_admin",
                "the agent lacks CAP_SYS_ADMIN, which NVMe admin commands need",
            ));
        }
        Err(e) => return Err(Failure::new("capget_failed", format!("capget: {e}"))),
    }
    let shown = node.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&node)
        .map_err(|e| Failure::new("open_failed", format!("{shown}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| Failure::new("open_failed", format!("{shown}: {e}")))?;
    let wanted = libc::makedev(device.major, device.minor);
    if !meta.file_type().is_block_device() || meta.rdev() != wanted {
        return Err(Failure::new(
            "wrong_device",
            format!(
                "{shown} is not block device {}:{} (sysfs's {})",
                device.major, device.minor, device.kname
            ),
        ));
    }
    let len = source.page_len();
    let mut buf = vec![0u8; len];
    let cmd = AdminCommand {
        timeout_ms: COMMAND_TIMEOUT_MS,
        ..AdminCommand::get_log_page(device.nsid.unwrap_or(1), page::LOG_ID, len)
    };
    nvme_admin::admin(&file, &cmd, &mut buf).map_err(|e| {
        let reason = match (&e, e.errno()) {
            (AdminError::Status(_), _) => "nvme_status",
            (_, Some(libc::EACCES)) => "eacces",
            (_, Some(libc::EPERM)) => "eperm",
            (_, Some(libc::EINVAL)) => "einval",
            (_, Some(libc::ENOTTY)) => "enotty",
            _ => "ioctl_failed",
        };
        Failure::new(reason, format!("{shown}: Get Log Page 0xD0: {e}"))
    })?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvme(model: &str) -> BlockDevice {
        BlockDevice {
            kname: "nvme1n1".into(),
            kind: Some(Kind::Disk),
            nsid: Some(1),
            model: model.into(),
            ..BlockDevice::default()
        }
    }

    #[test]
    fn only_ebs_and_instance_store_namespaces_are_asked() {
        assert_eq!(source_of(&nvme(EBS_MODEL)), Some(Source::Ebs));
        assert_eq!(
            source_of(&nvme(INSTANCE_STORE_MODEL)),
            Some(Source::InstanceStore)
        );
        assert_eq!(source_of(&nvme("Samsung SSD 980")), None);
        let partition = BlockDevice {
            kind: Some(Kind::Partition),
            ..nvme(EBS_MODEL)
        };
        assert_eq!(source_of(&partition), None);
        // An EBS volume attached over Xen's blkfront (no NVMe namespace) has no page.
        let xen = BlockDevice {
            nsid: None,
            ..nvme(EBS_MODEL)
        };
        assert_eq!(source_of(&xen), None);
    }

    #[test]
    fn a_node_that_is_not_the_device_is_not_asked() {
        // /dev/null is a character device: refused before any command (or, without the
        // capability, at the capability check).
        let dev = BlockDevice {
            kname: "null".into(),
            major: 259,
            ..nvme(EBS_MODEL)
        };
        let pages = Pages::Devices {
            devfs: PathBuf::from("/dev"),
        };
        let err = pages.read(&dev, Source::Ebs).unwrap_err();
        assert!(
            ["wrong_device", "no_cap_sys_admin"].contains(&err.reason),
            "{err}"
        );
        let missing = Pages::Files {
            dir: PathBuf::from("/nonexistent"),
        };
        assert_eq!(
            missing.read(&dev, Source::Ebs).unwrap_err().reason,
            "open_failed"
        );
    }
}
