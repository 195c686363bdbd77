//! `diskprobe_discovered_targets`, `diskprobe_discovered_targets_dropped`,
//! `diskprobe_discovered_targets_unnamed` and `diskprobe_discovery_last_rescan_timestamp_seconds`:
//! per `[[discover]]` rule (label `rule`), what its last rescan found; and
//! `diskprobe_discovered_target_lost_timestamp_seconds`, one per target a block rule lost
//! ([`crate::discovery::lost`]); read from [`Status`] on every scrape.

use super::{CollectError, Collector};
use crate::discovery::Status;
use crate::exposition::{Family, labels};
use std::sync::Arc;

/// Publishes the state of the discovery rules.
pub(crate) struct DiscoveryCollector {
    status: Arc<Status>,
}

impl DiscoveryCollector {
    /// A collector reading `status`.
    pub(crate) fn new(status: Arc<Status>) -> Self {
        DiscoveryCollector { status }
    }
}

impl Collector for DiscoveryCollector {
    fn name(&self) -> &'static str {
        "discovery"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let mut targets = Family::gauge(
            "diskprobe_discovered_targets",
            "Targets the discovery rule probes now (at most its max_targets).",
        );
        let mut dropped = Family::gauge(
            "diskprobe_discovered_targets_dropped",
            "Matches of the discovery rule left unprobed at its last rescan because they were beyond its max_targets.",
        );
        let mut unnamed = Family::gauge(
            "diskprobe_discovered_targets_unnamed",
            "Matches of the discovery rule left unprobed at its last rescan because its name template named nothing (the device has none of the facts a placeholder lists, or the name is empty).",
        );
        let mut rescanned = Family::gauge(
            "diskprobe_discovery_last_rescan_timestamp_seconds",
            "When the last rescan of the discovery rule completed, in Unix seconds.",
        );
        self.status.read(|rules| {
            for rule in rules {
                let l = labels(&[("rule", &rule.id)]);
                targets.push(&l, rule.targets as f64);
                dropped.push(&l, rule.dropped as f64);
                unnamed.push(&l, rule.unnamed as f64);
                if let Some(at) = rule.last_rescan {
                    rescanned.push(&l, at);
                }
            }
        });
        let mut lost = Family::gauge(
            "diskprobe_discovered_target_lost_timestamp_seconds",
            "When a rescan found the device of a target the block discovery rule was probing gone (Unix seconds), with the disk's identity when it was last seen; kept for the rule's lost_retention, across restarts, until the rule finds a target of that name again.",
        );
        self.status.read_lost(|entries| {
            for l in entries {
                lost.push(
                    &labels(&[
                        ("rule", &l.rule),
                        ("target", &l.target),
                        ("device", &l.device),
                        ("model", &l.model),
                        ("serial", &l.serial),
                        ("wwn", &l.wwn),
                        ("volume_id", &l.volume_id),
                    ]),
                    l.since(),
                );
            }
        });
        for family in [targets, dropped, unnamed, rescanned, lost] {
            family.finish_into(out);
        }
        Ok(())
    }
}
