#!/usr/bin/env bash
# Runs every fuzz target for RUNS executions (default 1,000,000) with libFuzzer via cargo-fuzz,
# seeded from the repository's fixtures and examples. Exits non-zero on the first crash (the
# reproducer lands in fuzz/artifacts/TARGET/).
#   fuzz/run.sh            # 1M executions per target
#   fuzz/run.sh 20000      # CI smoke pass
# Needs `cargo install cargo-fuzz`. cargo-fuzz wants a nightly compiler; with the stable toolchain
# RUSTC_BOOTSTRAP=1 and `-s none` (no sanitizer; coverage instrumentation only) make it work.
set -euo pipefail
RUNS=${1:-1000000}
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz not found: cargo install cargo-fuzz --locked" >&2; exit 1; }

seed() {
  local target=$1; shift
  mkdir -p "corpus/$target"
  for f in "$@"; do [[ -f "$f" ]] && cp "$f" "corpus/$target/seed-$(basename "$(dirname "$f")")-$(basename "$f")"; done
}
seed diskstats ../tests/fixtures/proc-*/diskstats
seed config ../config.example.toml ../deploy/systemd/config.toml ../deploy/kubernetes-discovery/config.toml
seed mountinfo ../tests/fixtures/discovery/proc/1/mountinfo
mkdir -p corpus/fio_options corpus/units
printf '%s' '-rw=randread -bs=4k -iodepth=32 -runtime=1s' > corpus/fio_options/seed-1
printf '%s' '--rw=randwrite --bs=1M --iodepth=16 --rate_iops=500 --direct=1 --ioengine=libaio --numjobs=1 --name=x --size=1G' > corpus/fio_options/seed-2
printf '%s' '1MiB' > corpus/units/seed-1; printf '%s' '500ms' > corpus/units/seed-2; printf '%s' '[::1]:9957' > corpus/units/seed-3
# negotiation: the Accept header, a newline, the Accept-Encoding header (as Prometheus sends them).
mkdir -p corpus/negotiation
printf '%s\n%s' 'application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1' 'gzip' > corpus/negotiation/seed-1
printf '%s\n%s' 'application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,text/plain;version=0.0.4;q=0.5,*/*;q=0.1' 'gzip' > corpus/negotiation/seed-2
printf '%s\n%s' 'text/plain;q=0, */*;q=0.5' 'gzip;q=0.5, identity;q=0.6, *;q=0' > corpus/negotiation/seed-3

# http_request: a raw request head (method, path, headers, Authorization), as a client sends it.
mkdir -p corpus/http_request
printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.8,text/plain;version=0.0.4;q=0.5\r\nAccept-Encoding: gzip\r\nAuthorization: Basic cHJvbWV0aGV1czpzZWNyZXQ=\r\n\r\n' > corpus/http_request/seed-1
printf 'HEAD /-/healthy HTTP/1.1\r\nHost: localhost\r\n\r\n' > corpus/http_request/seed-2
printf 'POST /../etc/passwd?x=%%00 HTTP/1.0\r\nAuthorization: Basic Og==\r\nContent-Length: 0\r\n\r\n' > corpus/http_request/seed-3

# lost_targets: the state directory's lost_targets.json, as the agent writes it, and with a
# duplicate, a time in the future and a name with a newline.
mkdir -p corpus/lost_targets
e() { printf '{"rule": "disks", "target": "%s", "device": "sdb", "model": "M", "serial": "S", "wwn": "", "volume_id": "", "since_ms": %s}' "$1" "$2"; }
printf '{"version": 1, "lost": [%s, %s]}' "$(e disk-S 1699999999000)" "$(e disk-T 1699999998000)" > corpus/lost_targets/seed-1
printf '{"version": 1, "lost": [%s, %s, %s]}' "$(e a 1)" "$(e a 2)" "$(e 'b\nc' 99999999999999)" > corpus/lost_targets/seed-2

cargo fuzz build -s none -O
for target in diskstats config fio_options units mountinfo negotiation http_request lost_targets; do
  echo "--- $target: $RUNS runs"
  dirs=("corpus/$target")
  [[ -d "regressions/$target" ]] && dirs+=("regressions/$target")   # past crashes, kept as seeds
  cargo fuzz run -s none -O "$target" "${dirs[@]}" -- -runs="$RUNS" -max_len=4096 2>&1 \
    | grep -E '^(Done|==|INFO: Running with|.*panicked|.*Crash)' || true
  # cargo fuzz exits non-zero on a crash; with pipefail the grep above would hide it, so check:
  if compgen -G "artifacts/$target/crash-*" >/dev/null; then
    echo "crash in $target: see fuzz/artifacts/$target" >&2
    exit 1
  fi
done
