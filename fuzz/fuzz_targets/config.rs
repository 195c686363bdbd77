//! Fuzzes the configuration loader: any text is either a valid configuration or an error that
//! names a location inside the text.
#![no_main]

use diskprobe_exporter::config::{Config, ConfigError};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_toml(text, Path::new("fuzz.toml")) {
        Ok(_) => {}
        Err(ConfigError::Invalid { line, column, message, .. }) => {
            assert!(line >= 1 && line <= text.lines().count().max(1) + 1, "line {line}");
            assert!(column >= 1);
            assert!(!message.is_empty());
        }
        Err(other) => panic!("unexpected error kind: {other}"),
    }
});
