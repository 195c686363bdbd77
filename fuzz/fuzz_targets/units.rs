//! Fuzzes the size, duration, throughput and listen-address parsers: no panics, errors say something.
#![no_main]

use diskprobe_exporter::config::ListenAddress;
use diskprobe_exporter::units;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = units::parse_size(text) {
        assert!(!e.to_string().is_empty());
    }
    if let Err(e) = units::parse_duration(text) {
        assert!(!e.to_string().is_empty());
    }
    if let Err(e) = units::parse_fio_duration(text) {
        assert!(!e.to_string().is_empty());
    }
    match units::parse_throughput(text) {
        Ok(bytes) => assert!(bytes > 0),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    if let Ok(a) = ListenAddress::parse(text) {
        // What we print parses back to the same address.
        assert_eq!(ListenAddress::parse(&a.to_string()).ok(), Some(a));
    }
});
