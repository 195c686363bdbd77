# Set-up shared by the benchmark scripts. Source it from the repository root:
#   cd "$(dirname "$0")/.." && source bench/common.sh
# It provides the release binary ($OURS), a work directory ($WORK) that is removed on exit together
# with the processes in $PIDS and the loop device in $LOOP, and small helpers.

# need TOOL [HINT]: exits with a message unless TOOL is on PATH.
need() {
  command -v "$1" >/dev/null || { echo "$1 not found${2:+ ($2)}" >&2; exit 1; }
}

# need_root WHY: exits unless running as root.
need_root() {
  [[ $(id -u) == 0 ]] || { echo "needs root ($1)" >&2; exit 1; }
}

# find_node_exporter: sets $NODE to Debian's prometheus-node-exporter or a node_exporter on PATH.
find_node_exporter() {
  NODE=$(command -v prometheus-node-exporter || command -v node_exporter || true)
  [[ -n "$NODE" ]] || { echo "node_exporter not found (apt-get install prometheus-node-exporter)" >&2; exit 1; }
}

# build_ours: builds the release binary once and sets $OURS to it.
build_ours() {
  cargo build --release --locked --quiet
  OURS=${CARGO_TARGET_DIR:-target}/release/diskprobe_exporter
}

PIDS=()
LOOP=""
WORK=""
bench_cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  [[ -n "$LOOP" ]] && { losetup -d "$LOOP" 2>/dev/null || true; }
  [[ -n "$WORK" ]] && rm -rf "$WORK"
  return 0
}

# make_workdir TEMPLATE: creates $WORK (mktemp -d TEMPLATE) and cleans up on exit.
make_workdir() {
  WORK=$(mktemp -d "$1")
  trap bench_cleanup EXIT
}

# tmpfs_loop MIB: a loop device ($LOOP) over MIB MiB of random data in $WORK (which should be on
# tmpfs, e.g. make_workdir /dev/shm/name.XXXXXX); detached on exit.
tmpfs_loop() {
  head -c $(($1 << 20)) /dev/urandom > "$WORK/backing.img"
  LOOP=$(losetup --find --show "$WORK/backing.img")
}

# free_port: prints a free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
