//! Fuzzes the fio option-string parser: no panics; accepted profiles are runnable.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match diskprobe_exporter::probe::fio::parse(text) {
        Ok(p) => {
            assert!(p.block_size > 0);
            assert!(p.iodepth > 0);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
