//! Fuzzes the mountinfo parser: any text parses without panicking, every accepted mount has a
//! filesystem type, and unescaping never lengthens a field.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for m in diskprobe_exporter::mountinfo::parse(text) {
        assert!(!m.fstype.is_empty());
        assert!(m.mountpoint.len() <= text.len());
    }
});
