#!/usr/bin/env bash
# The agent's CPU while it probes, which is what its CPU request must cover (an average over the
# probe interval is mostly idle time). The agent runs the shipped Kubernetes configuration's
# profiles (deploy/kubernetes/configmap.yaml) with their default runtime, every 2 s instead of
# every 5 minutes, on a probe file on the disk holding /var/tmp (as the pod's emptyDir lives on the
# node's disk) and on a loop device over tmpfs, with each engine (psync is what runs under
# containerd's RuntimeDefault seccomp profile, which blocks io_uring). It runs in a cpuacct cgroup of
# its own (cgroup v1; /proc/PID/stat otherwise), sampled every 100 ms after the probe file's fill.
# Per setup it prints:
#   - CPU during runs: CPU time over the time spent probing (diskprobe_probe_busy_seconds_total),
#     in millicores; and per run, in ms;
#   - the 100 ms windows: p90, p99 and max CPU, in millicores;
#   - the average over the whole window, for comparison (here with a run every 2 s; at the shipped
#     5-minute interval it is 150 times lower).
# Usage: bench/probe_cpu.sh [SECONDS per setup, default 30]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need_root "loop device, cgroup"
need curl
SECONDS_PER_SETUP=${1:-30}
build_ours
make_workdir /var/tmp/diskprobe-probe-cpu.XXXXXX
SHM=$(mktemp -d /dev/shm/diskprobe-probe-cpu.XXXXXX)
CG=""
cleanup() {
  bench_cleanup
  rm -rf "$SHM"
  [[ -n "$CG" ]] && rmdir "$CG" 2>/dev/null
  return 0
}
trap cleanup EXIT
head -c $((256 << 20)) /dev/urandom > "$SHM/backing.img"
LOOP=$(losetup --find --show "$SHM/backing.img")

PROFILES=$(sed -n 's/^ *profiles = \(.*\)$/\1/p' deploy/kubernetes/configmap.yaml)
SIZE=$(sed -n 's/^ *size = \(.*\)$/\1/p' deploy/kubernetes/configmap.yaml)
echo "profiles $PROFILES, probe file size $SIZE; $(nproc) CPUs; $SECONDS_PER_SETUP s per setup"
if [[ -f /sys/fs/cgroup/cpuacct/cpuacct.usage ]]; then
  CG=/sys/fs/cgroup/cpuacct/diskprobe-probe-cpu-$$
  mkdir "$CG"
fi

metric() { # metric PORT NAME: the sum of a family's samples
  curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 ~ "^"n"({|$)" {s+=$2} END {printf "%.6f\n", s+0}'
}

measure() { # measure NAME ENGINE PATH
  local name=$1 engine=$2 path=$3 port pid
  port=$(free_port)
  printf '[defaults]\ninterval = "2s"\njitter = 0.0\nmax_duty_cycle = 0.9\nengine = "%s"\n[[targets]]\nname = "%s"\npath = "%s"\nsize = %s\nprofiles = %s\n' \
    "$engine" "$name" "$path" "$SIZE" "$PROFILES" > "$WORK/$name-$engine.toml"
  if [[ -n "$CG" ]]; then
    sh -c "echo \$\$ > $CG/cgroup.procs; exec $OURS --config.file=$WORK/$name-$engine.toml --web.listen-address=127.0.0.1:$port --log.level=warn" &
  else
    "$OURS" --config.file="$WORK/$name-$engine.toml" --web.listen-address="127.0.0.1:$port" --log.level=warn &
  fi
  pid=$!; PIDS+=("$pid")
  # After the fill and a first run.
  for _ in $(seq 600); do
    [[ $(metric "$port" diskprobe_probe_runs_total) != 0.000000 ]] && break
    sleep 0.1
  done
  python3 - "$pid" "${CG:-}" "$port" "$SECONDS_PER_SETUP" "$name" "$engine" <<'PY'
import sys, time, urllib.request
pid, cg, port, seconds, name, engine = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6]
tick = 1e9 / 100  # USER_HZ

def cpu_ns():
    if cg:
        return int(open(f"{cg}/cpuacct.usage").read())
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * tick

def metric(name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines()
               if l.startswith(name + "{") or l.startswith(name + " "))

busy0, runs0 = metric("diskprobe_probe_busy_seconds_total"), metric("diskprobe_probe_runs_total")
t0 = time.monotonic(); c0 = cpu_ns(); windows = []
last_t, last_c = t0, c0
while last_t - t0 < seconds:
    time.sleep(0.1)
    t, c = time.monotonic(), cpu_ns()
    windows.append((c - last_c) / (t - last_t) / 1e6)  # millicores
    last_t, last_c = t, c
busy1, runs1 = metric("diskprobe_probe_busy_seconds_total"), metric("diskprobe_probe_runs_total")
cpu = (last_c - c0) / 1e9
busy, runs = busy1 - busy0, runs1 - runs0
w = sorted(windows)
q = lambda p: w[min(len(w) - 1, int(p * len(w)))]
print(f"{name:5} {engine:8} runs {runs:3.0f}  busy {busy:6.2f} s  cpu {cpu:6.3f} s  "
      f"during runs {1000 * cpu / busy:5.1f} m ({1000 * cpu / runs:5.1f} ms/run)  "
      f"100ms windows p90 {q(0.9):5.1f} m  p99 {q(0.99):6.1f} m  max {w[-1]:6.1f} m  "
      f"average {1000 * cpu / (last_t - t0):5.1f} m")
PY
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

for engine in psync io_uring; do
  measure file "$engine" "$WORK/probe.dat"
  measure loop "$engine" "$LOOP"
done
