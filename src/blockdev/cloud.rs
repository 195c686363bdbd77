//! What a cloud calls a disk, where the kernel shows it: pure rules over facts that
//! [`super::sysfs`] reads, never changing what the kernel reports (`serial` and `wwn` stay as
//! they are; these are added beside them).
//!
//! - AWS: an EBS volume on NVMe has model `Amazon Elastic Block Store` and serial `vol0123…`,
//!   the volume id `vol-0123…` without its dash; instance-store NVMe has model
//!   `Amazon EC2 NVMe Instance Storage` and no volume id.
//! - Azure: a SCSI disk of vendor `Msft`, model `Virtual Disk` is known by its LUN, the last
//!   number of its SCSI address `H:C:T:L`, unless its VMBus controller is the one of the OS and
//!   resource disks (`device_id` `{f8b3781a-…}`); an NVMe namespace of model
//!   `MSFT NVMe Accelerator v1.0` is the OS disk as namespace 1 and data disk LUN `nsid - 2`
//!   after it (the mapping of Azure's `azure-vm-utils` udev rules); `Microsoft NVMe Direct
//!   Disk` (v1, v2) is local NVMe, without LUN.
//! - GCP: a SCSI disk of vendor `Google` (`PersistentDisk`, `EphemeralDisk`) carries its device
//!   name as the unit serial number (VPD page 0x80, `device/vpd_pg80`); NVMe models
//!   `nvme_card-pd` and `nvme_card` are GCP's, whose device name is only in NVMe identify vendor
//!   data: a JSON object with `device_name` in Identify Namespace's vendor-specific area (offset
//!   384; public: `GoogleCloudPlatform/guest-configs` `google_nvme_id`), which
//!   [`super::complete_from_nvme`] reads and [`gcp_device_name`] parses.
//! - virtio-blk: the serial is what the hypervisor was told to name the volume (OpenStack puts
//!   the Cinder volume id there), so it is the volume id.

/// The NVMe model of an EBS volume.
pub(crate) const EBS_MODEL: &str = "Amazon Elastic Block Store";
/// The NVMe model of an EC2 instance-store device.
pub(crate) const INSTANCE_STORE_MODEL: &str = "Amazon EC2 NVMe Instance Storage";

/// The cloud a disk belongs to, as far as its identifiers tell.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Cloud {
    /// No cloud recognised (bare metal, KVM, OpenStack, ...).
    #[default]
    None,
    /// Amazon EC2 (EBS, instance store).
    Aws,
    /// Microsoft Azure.
    Azure,
    /// Google Cloud.
    Gcp,
}

impl Cloud {
    /// `aws`, `azure`, `gcp`, or `""`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Cloud::None => "",
            Cloud::Aws => "aws",
            Cloud::Azure => "azure",
            Cloud::Gcp => "gcp",
        }
    }
}

/// What the cloud calls a disk (every field empty when nothing says).
#[derive(
    Debug,
    Clone,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(default)]
pub struct CloudId {
    /// The cloud.
    pub cloud: Cloud,
    /// The volume's id or name: EBS `vol-…`, a GCP device name, a virtio serial; or `""`.
    pub volume_id: String,
    /// The Azure LUN of a data disk, or `""`.
    pub lun: String,
}

/// How a disk is attached, from where its `device` link leads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Transport {
    /// An NVMe namespace.
    Nvme,
    /// A SCSI (or SATA through libata) device.
    Scsi,
    /// A virtio-blk device.
    Virtio,
    /// Anything else, or unknown.
    #[default]
    Other,
}

/// The facts of one whole disk that the rules look at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Facts<'a> {
    /// How it is attached.
    pub transport: Transport,
    /// `device/vendor`, trimmed.
    pub vendor: &'a str,
    /// `device/model`, trimmed.
    pub model: &'a str,
    /// The serial as reported (`device/serial` or `serial`), trimmed.
    pub serial: &'a str,
    /// A SCSI device's address `H:C:T:L`.
    pub scsi_address: Option<[u32; 4]>,
    /// The `device_id` of the nearest ancestor that has one (a VMBus device on Azure).
    pub controller_id: Option<&'a str>,
    /// An NVMe namespace's id (`nsid`).
    pub nsid: Option<u32>,
    /// The unit serial number of VPD page 0x80, when readable.
    pub vpd_serial: Option<&'a str>,
}

/// Azure's VMBus controller of the OS disk (LUN 0) and the resource disk (LUN 1).
const AZURE_OS_CONTROLLER: &str = "{f8b3781a-1e82-4818-a1c3-63d806ec15bb}";

/// What the cloud calls the disk with `facts`.
pub(crate) fn identify(facts: &Facts<'_>) -> CloudId {
    let none = CloudId::default();
    match facts.transport {
        Transport::Nvme => nvme(facts),
        Transport::Scsi => scsi(facts),
        Transport::Virtio if !facts.serial.is_empty() => CloudId {
            volume_id: facts.serial.to_owned(),
            ..none
        },
        Transport::Virtio | Transport::Other => none,
    }
}

fn nvme(facts: &Facts<'_>) -> CloudId {
    let model = facts.model;
    if model == EBS_MODEL {
        return CloudId {
            cloud: Cloud::Aws,
            volume_id: ebs_volume_id(facts.serial).unwrap_or_default(),
            lun: String::new(),
        };
    }
    if model == INSTANCE_STORE_MODEL {
        return with_cloud(Cloud::Aws);
    }
    if model == "MSFT NVMe Accelerator v1.0" {
        let lun = facts
            .nsid
            .filter(|&n| n >= 2)
            .map(|n| (n - 2).to_string())
            .unwrap_or_default();
        return CloudId {
            cloud: Cloud::Azure,
            volume_id: String::new(),
            lun,
        };
    }
    if model.starts_with("Microsoft NVMe Direct Disk") {
        return with_cloud(Cloud::Azure);
    }
    if model == "nvme_card" || model == "nvme_card-pd" {
        return with_cloud(Cloud::Gcp);
    }
    CloudId::default()
}

fn scsi(facts: &Facts<'_>) -> CloudId {
    match (facts.vendor, facts.model) {
        ("Msft", "Virtual Disk") => {
            let os_controller = facts.controller_id == Some(AZURE_OS_CONTROLLER);
            let lun = facts
                .scsi_address
                .filter(|_| !os_controller)
                .map(|a| a[3].to_string())
                .unwrap_or_default();
            CloudId {
                cloud: Cloud::Azure,
                volume_id: String::new(),
                lun,
            }
        }
        ("Google", _) => CloudId {
            cloud: Cloud::Gcp,
            volume_id: facts.vpd_serial.unwrap_or_default().to_owned(),
            lun: String::new(),
        },
        _ => CloudId::default(),
    }
}

fn with_cloud(cloud: Cloud) -> CloudId {
    CloudId {
        cloud,
        ..CloudId::default()
    }
}

/// The EBS volume id of an EBS NVMe serial: `vol0123abcd…` is `vol-0123abcd…` (an id already
/// with its dash is kept).
pub(crate) fn ebs_volume_id(serial: &str) -> Option<String> {
    let rest = serial.strip_prefix("vol")?;
    let rest = rest.strip_prefix('-').unwrap_or(rest);
    (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("vol-{rest}"))
}

/// A SCSI address `H:C:T:L` (the name of a SCSI device's sysfs directory).
pub(crate) fn parse_scsi_address(text: &str) -> Option<[u32; 4]> {
    let mut parts = text.trim().split(':').map(str::parse::<u32>);
    let mut out = [0; 4];
    for slot in &mut out {
        *slot = parts.next()?.ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// The unit serial number of a VPD page 0x80 (`device/vpd_pg80`): a 4-byte header whose last
/// byte is the length, then ASCII, padded with spaces or NULs.
pub(crate) fn parse_vpd_pg80(page: &[u8]) -> Option<String> {
    if page.len() < 4 || page[1] != 0x80 {
        return None;
    }
    let len = usize::from(page[3]);
    let body = page.get(4..4 + len).unwrap_or(&page[4..]);
    let text: String = String::from_utf8_lossy(body)
        .trim_matches(|c: char| c == '\0' || c.is_whitespace())
        .to_owned();
    (!text.is_empty()).then_some(text)
}

/// An ASCII field of identify data: up to the first NUL, trimmed.
fn ascii(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).trim().to_owned()
}

/// A GCP disk's device name from Identify Namespace data: the `device_name` of the JSON object
/// in its vendor-specific area.
pub(crate) fn gcp_device_name(id_ns: &[u8]) -> Option<String> {
    let text = ascii(id_ns.get(384..)?);
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let name = value.get("device_name")?.as_str()?.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(transport: Transport, vendor: &'static str, model: &'static str) -> Facts<'static> {
        Facts {
            transport,
            vendor,
            model,
            ..Facts::default()
        }
    }

    #[test]
    fn ebs_serials_become_volume_ids() {
        assert_eq!(
            ebs_volume_id("vol0123456789abcdef0").as_deref(),
            Some("vol-0123456789abcdef0")
        );
        assert_eq!(ebs_volume_id("vol-0abc").as_deref(), Some("vol-0abc"));
        assert_eq!(ebs_volume_id("AWS1234"), None);
        assert_eq!(ebs_volume_id("volume"), None);
        let ebs = Facts {
            serial: "vol0aa",
            ..facts(Transport::Nvme, "", "Amazon Elastic Block Store")
        };
        assert_eq!(identify(&ebs).volume_id, "vol-0aa");
        assert_eq!(identify(&ebs).cloud, Cloud::Aws);
        let store = facts(Transport::Nvme, "", "Amazon EC2 NVMe Instance Storage");
        assert_eq!(identify(&store), with_cloud(Cloud::Aws));
    }

    #[test]
    fn azure_luns_come_from_the_scsi_address_or_the_namespace() {
        let data = Facts {
            scsi_address: Some([1, 0, 0, 3]),
            controller_id: Some("{f8b3781b-1e82-4818-a1c3-63d806ec15bb}"),
            ..facts(Transport::Scsi, "Msft", "Virtual Disk")
        };
        assert_eq!(identify(&data).lun, "3");
        let os = Facts {
            controller_id: Some(AZURE_OS_CONTROLLER),
            ..data.clone()
        };
        assert_eq!(identify(&os), with_cloud(Cloud::Azure));
        let remote = |nsid| Facts {
            nsid: Some(nsid),
            ..facts(Transport::Nvme, "", "MSFT NVMe Accelerator v1.0")
        };
        assert_eq!(identify(&remote(1)).lun, "");
        assert_eq!(identify(&remote(2)).lun, "0");
        assert_eq!(identify(&remote(5)).lun, "3");
    }

    #[test]
    fn gcp_and_virtio_names() {
        let mut page = vec![0u8, 0x80, 0, 9];
        page.extend_from_slice(b"data-disk");
        assert_eq!(parse_vpd_pg80(&page).as_deref(), Some("data-disk"));
        assert_eq!(parse_vpd_pg80(b"\0\x83\0\x01x"), None);
        let gcp = Facts {
            vpd_serial: Some("data-disk"),
            ..facts(Transport::Scsi, "Google", "PersistentDisk")
        };
        assert_eq!(identify(&gcp).volume_id, "data-disk");
        assert_eq!(identify(&gcp).cloud, Cloud::Gcp);
        let virtio = Facts {
            serial: "3f1c2b9e-7d4a-4e2b-9",
            ..facts(Transport::Virtio, "", "")
        };
        assert_eq!(identify(&virtio).volume_id, "3f1c2b9e-7d4a-4e2b-9");
        assert_eq!(identify(&virtio).cloud, Cloud::None);
        assert_eq!(parse_scsi_address("0:0:1:7"), Some([0, 0, 1, 7]));
        assert_eq!(parse_scsi_address("host0"), None);
    }

    #[test]
    fn gcp_nvme_names_come_from_identify_namespace() {
        let mut ns = vec![0u8; 4096];
        ns[384..388].copy_from_slice(b"xvdg");
        ns[416..437].copy_from_slice(b"vol-0123456789abcdef0");
        let mut gcp = vec![0u8; 4096];
        let json = br#"{"device_name":"data-disk-1","disk_type":"PERSISTENT"}"#;
        gcp[384..384 + json.len()].copy_from_slice(json);
        assert_eq!(gcp_device_name(&gcp).as_deref(), Some("data-disk-1"));
        assert_eq!(gcp_device_name(&ns), None);
    }
}
