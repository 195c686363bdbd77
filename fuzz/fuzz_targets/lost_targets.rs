//! Fuzzes the state directory's lost-targets file: any bytes parse or are refused without
//! panicking ([`lost_file::parse`]), and what is admitted of the entries against a block rule
//! with `max_targets = 2` ([`lost::admit`]) is one entry per target, at most two for the rule,
//! none in the future, every name one the name check accepts.
#![no_main]

use diskprobe_exporter::config::{Config, DiscoverRule, target_name};
use diskprobe_exporter::discovery::{lost, lost_file};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// A block rule `disks` keeping at most two lost targets.
fn rules() -> &'static [DiscoverRule] {
    static RULES: OnceLock<Vec<DiscoverRule>> = OnceLock::new();
    RULES.get_or_init(|| {
        Config::from_toml(
            "[[discover]]\nid = \"disks\"\nkind = \"block\"\nmax_targets = 2\n",
            std::path::Path::new("fuzz.toml"),
        )
        .expect("the rule validates")
        .discover
    })
}

/// A fixed "now": 2023-11-14, in Unix seconds.
const NOW: f64 = 1_700_000_000.0;

fuzz_target!(|data: &[u8]| {
    let Ok(entries) = lost_file::parse(data) else {
        return;
    };
    let (kept, _notes) = lost::admit(entries, rules(), NOW);
    let mut seen = std::collections::BTreeSet::new();
    for l in &kept {
        assert!(seen.insert((l.rule.clone(), l.target.clone())), "one per target");
        assert!(l.since() <= NOW, "not in the future");
        assert_eq!(target_name::check(&l.target), Ok(()));
    }
    assert!(kept.iter().filter(|l| l.rule == "disks").count() <= 2);
});
