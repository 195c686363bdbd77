//! `[retired] disks`: disks gone for good, which the agent stops reporting as lost or vanished.
//!
//! Each entry names a disk by what it was known as: its serial, WWN or cloud volume id (the
//! `serial`, `wwn` and `volume_id` labels of `diskprobe_disk_info` and of
//! `diskprobe_discovered_target_lost_timestamp_seconds`), or the name of the target that probed
//! it. A block `[[discover]]` rule drops the lost targets it names and records none of them
//! again ([`crate::discovery::lost`]); a configured target forgets its last device when the list
//! names it or its disk ([`crate::scheduler`]'s last devices), so that `DiskprobeDiskLost` and
//! `DiskprobeTargetVanished` end. A configured target with device writes drops its pin when the
//! list names the disk it was pinned to (by serial, WWN, volume id or the id its refusal gives;
//! not by target name, which would drop every pin anew at each reload), so that its next write
//! run may go to the disk at its path then. Applied at start and at every reload; a retired
//! disk that is present is probed as before.

use super::raw::RawConfig;
use super::spanned::{SpannedError, invalid};
use super::target_name;
use std::collections::BTreeSet;

/// The most entries `[retired] disks` may have.
pub(crate) const MAX_RETIRED: usize = 4096;

/// Validated `[retired]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retired {
    disks: BTreeSet<String>,
}

impl Retired {
    #[cfg(test)]
    /// A list of the given names (tests).
    pub(crate) fn of<'a>(names: impl IntoIterator<Item = &'a str>) -> Retired {
        Retired {
            disks: names.into_iter().map(str::to_owned).collect(),
        }
    }

    #[cfg(test)]
    /// Whether nothing is retired.
    pub(crate) fn is_empty(&self) -> bool {
        self.disks.is_empty()
    }

    /// Whether the list names the disk a target called `target` probed, whose serial, WWN and
    /// cloud volume id are `ids` (empty ones never match).
    pub(crate) fn names(&self, target: &str, ids: [&str; 3]) -> bool {
        std::iter::once(target).chain(ids).any(|id| self.lists(id))
    }

    /// Whether the list has the entry `id` (an empty one is never listed).
    pub(crate) fn lists(&self, id: &str) -> bool {
        !id.is_empty() && self.disks.contains(id)
    }
}

/// `[retired]` of `raw`: every entry a name the name check accepts (serials and WWNs are such
/// names), at most [`MAX_RETIRED`].
pub(super) fn validate(raw: &RawConfig) -> Result<Retired, SpannedError> {
    let Some(list) = &raw.retired.disks else {
        return Ok(Retired::default());
    };
    if list.get_ref().len() > MAX_RETIRED {
        return Err(invalid(
            list,
            format!(
                "retired.disks: expected at most {MAX_RETIRED} entries, found {}",
                list.get_ref().len()
            ),
        ));
    }
    let mut disks = BTreeSet::new();
    for entry in list.get_ref() {
        target_name::check(entry.get_ref())
            .map_err(|e| invalid(entry, format!("retired.disks: {e}")))?;
        disks.insert(entry.get_ref().clone());
    }
    Ok(Retired { disks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_is_named_by_its_target_or_an_identity_never_by_an_empty_one() {
        let r = Retired::of(["S6XNNA0R123456", "disk-old", "vol-0abc"]);
        assert!(r.names("disk-old", ["", "", ""]));
        assert!(r.names("data", ["S6XNNA0R123456", "", ""]));
        assert!(r.names("data", ["", "naa.1", "vol-0abc"]));
        assert!(!r.names("data", ["S6XNNA0R654321", "naa.1", ""]));
        assert!(!Retired::of([""]).names("", ["", "", ""]));
        assert!(Retired::default().is_empty());
    }
}
