//! Discovery: `[[discover]]` rules turn the block devices and mounts the machine has now into
//! probe targets, rescanned on a period, so that one configuration serves a fleet of unlike
//! machines and follows volumes as they are attached, mounted, unmounted and detached.
//!
//! - Block devices come from [`crate::blockdev`] (its one sysfs reader); the mount table from
//!   [`crate::mountinfo`].
//! - [`matching`]: pure: what each rule finds in a scan, and all rules together.
//! - [`rescan`]: the task that scans on a thread every `rescan` and publishes the targets found,
//!   which the agent hands to the scheduler beside the configured ones; and the rules' status
//!   for `diskprobe_discovered_targets`.
//! - [`lost`]: targets whose device disappeared while a block rule probed them, kept for the
//!   rule's `lost_retention`; [`lost_file`]: where they are kept across restarts.

pub mod lost;
pub mod lost_file;
pub mod matching;
pub mod rescan;

pub(crate) use rescan::{Discovery, Plan, Status};
