//! The Rust types of the protobuf exposition (`src/exposition/proto/io.prometheus.client.rs`) are
//! generated from the checked-in `src/exposition/proto/metrics.proto` (Prometheus' official
//! `io.prometheus.client` data model) by prost-build, with protox as the compiler so that no
//! `protoc` binary is needed. This test generates them again and fails when the checked-in code
//! differs; `UPDATE_GENERATED=1 cargo test --test it protobuf_codegen::` rewrites it.

use crate::common;

fn generated_code_matches_metrics_proto() {
    let proto_dir = common::repo_root().join("src/exposition/proto");
    let fds = protox::compile([proto_dir.join("metrics.proto")], [&proto_dir])
        .expect("metrics.proto compiles");
    let out = tempfile::tempdir().unwrap();
    prost_build::Config::new()
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("prost-build generates code");
    let name = "io.prometheus.client.rs";
    let generated = std::fs::read_to_string(out.path().join(name)).unwrap();
    let checked_in = proto_dir.join(name);
    if std::env::var("UPDATE_GENERATED").is_ok_and(|v| v == "1") {
        std::fs::write(&checked_in, &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&checked_in).unwrap_or_default();
    assert!(
        current == generated,
        "{} is not what prost-build generates from metrics.proto; run \
         UPDATE_GENERATED=1 cargo test --test it protobuf_codegen:: and review the diff",
        checked_in.display()
    );
}

crate::tests! {
    generated_code_matches_metrics_proto,
}
