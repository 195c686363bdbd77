//! Configuration errors: each bad file must be reported with its exact location and message,
//! and `--config.check` must exit 2 for it (0 for good files).

mod common;

use diskprobe_exporter::config::Config;
use std::path::Path;
use std::process::Command;

/// (file content, expected error after "bad.toml:").
const BAD: &[(&str, &str)] = &[
    (
        "[web]\nlisten_adress = \":9957\"\n",
        "2:1: web.listen_adress: unknown field `listen_adress`, expected `listen_address` or `telemetry_path`",
    ),
    (
        "[webb]\n",
        "1:2: unknown field `webb`, expected `web` or `diskstats`",
    ),
    (
        "[web]\nlisten_address = 9957\n",
        "2:18: web.listen_address: invalid type: integer `9957`, expected a string",
    ),
    (
        "[web]\n  listen_address = \"localhost\"\n",
        "2:20: web.listen_address: expected host:port or :port, found \"localhost\"",
    ),
    (
        "[web]\nlisten_address = \":65536\"\n",
        "2:18: web.listen_address: expected a port number 0-65535 after ':', found \"65536\"",
    ),
    (
        "[web]\ntelemetry_path = \"metrics\"\n",
        "2:18: web.telemetry_path: expected an absolute URL path other than / and /-/..., found \"metrics\"",
    ),
    (
        "# comment\n[diskstats]\ndevice_exclude = \"(\"\n",
        "3:18: diskstats.device_exclude: expected a regular expression, unclosed group",
    ),
    (
        "[diskstats]\ndevice_include = \"a\"\ndevice_exclude = \"b\"\n",
        "2:18: diskstats: device_include and device_exclude are mutually exclusive; set one",
    ),
    (
        "[diskstats]\ndevice_exclud = \"b\"\n",
        "2:1: diskstats.device_exclud: unknown field `device_exclud`, expected `device_include` or `device_exclude`",
    ),
    (
        "x = \n",
        "1:5: x: string values must be quoted, expected literal string",
    ),
    ("[web]\n[web]\n", "2:2: duplicate key"),
];

#[test]
fn every_bad_config_is_located() {
    for (text, expected) in BAD {
        let err = Config::from_toml(text, Path::new("bad.toml"))
            .expect_err(&format!("should be rejected:\n{text}"));
        assert_eq!(
            err.to_string(),
            format!("bad.toml:{expected}"),
            "for:\n{text}"
        );
    }
}

#[test]
fn config_check_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, (text, expected)) in BAD.iter().enumerate() {
        let path = tmp.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = Command::new(common::binary())
            .arg("--config.check")
            .arg(format!("--config.file={}", path.display()))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{}:{expected}", path.display())),
            "stderr for {text:?} was {stderr}"
        );
    }
    let empty = tmp.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    for args in [
        vec!["--config.check".to_owned()],
        vec![
            "--config.check".to_owned(),
            format!("--config.file={}", empty.display()),
        ],
    ] {
        let out = Command::new(common::binary()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
    }
    let missing = Command::new(common::binary())
        .args([
            "--config.check",
            "--config.file=/nonexistent/diskprobe.toml",
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/diskprobe.toml"));
}

#[test]
fn example_config_loads_and_means_the_defaults() {
    let path = common::repo_root().join("config.example.toml");
    let config = Config::load(&path).expect("config.example.toml must be valid");
    assert_eq!(
        config.web.listen_address.map(|a| a.to_string()),
        Some(":9957".to_owned())
    );
    assert_eq!(config.web.telemetry_path.as_deref(), Some("/metrics"));
    assert_eq!(
        config.diskstats.filter.describe(),
        diskprobe_exporter::device_filter::DeviceFilter::default().describe()
    );
}
