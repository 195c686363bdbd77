// What the probes measure: latency, IOPS, throughput and sync latency against their limits.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local pair = s.by(['job', 'instance', 'target', 'profile']);
  local baseline(record) = 'last_over_time(%s[2h])' % s.sel('diskprobe:%s:baseline_7d' % record);
  local current(record) = s.sel('diskprobe:%s:median_30m' % record);
  // A share as words: 0.5 is "half", others a percentage.
  local share(r) = if r == 0.5 then 'half' else '%g%%' % (r * 100);
  local alert(name, rule) = { alert: name } + rule + { annotations+: s.runbook(name) };
  [{
    name: 'diskprobe.alerts',
    rules: [
      // The median p99 of the last runs is more than 2.5x the target's own baseline and at least
      // 100 us above it (the delta scales with the baseline: NVMe 150 us -> 600 us fires, HDD
      // 13 ms -> 54 ms fires; a 30 us device moving to 90 us does not). Latency profiles only:
      // a deep uncapped queue's latency is its IOPS (Little's law), watched by the IOPS and
      // throughput alerts.
      alert('DiskprobeLatencyRegression', {
        expr: |||
          (
            %(current)s
              > %(ratio)s * %(baseline)s
          )
          and (
            %(current)s
              - %(baseline)s
              > %(delta)s
          )
          unless on (%(pair)s) %(info)s
        ||| % {
          current: current('probe_latency_p99'),
          baseline: baseline('probe_latency_p99'),
          ratio: c.latencyRegressionRatio,
          delta: c.latencyRegressionMinDeltaSeconds,
          pair: pair,
          info: s.sel('diskprobe_profile_info', ['iodepth!="1"', 'rate_iops="0"']),
        },
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk latency regression on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'The median p99 latency of the last runs of profile {{ $labels.profile }} is {{ $value | humanizeDuration }}, more than %gx its 7-day baseline.' % c.latencyRegressionRatio,
        },
      }),
      // Small-block (< 100,000 bytes), uncapped profiles deeper than 1: IOPS under half its baseline.
      alert('DiskprobeIOPSDrop', {
        expr: |||
          %s
            < %s * %s
          and on (%s) %s
        ||| % [
          current('probe_iops'),
          c.iopsDropRatio,
          baseline('probe_iops'),
          pair,
          s.sel('diskprobe_profile_info', ['block_size=~"[0-9]{1,5}"', 'iodepth!="1"', 'rate_iops="0"']),
        ],
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk IOPS dropped on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'The median IOPS of the last runs of profile {{ $labels.profile }} is {{ $value | humanize }}, less than %s of its 7-day baseline.' % share(c.iopsDropRatio),
        },
      }),
      // Large-block (>= 100,000 bytes), uncapped profiles deeper than 1: throughput under half its baseline.
      alert('DiskprobeThroughputDrop', {
        expr: |||
          %s
            < %s * %s
          and on (%s) %s
        ||| % [
          current('probe_throughput_bytes_per_second'),
          c.throughputDropRatio,
          baseline('probe_throughput_bytes_per_second'),
          pair,
          s.sel('diskprobe_profile_info', ['block_size=~"[0-9]{6,}"', 'iodepth!="1"', 'rate_iops="0"']),
        ],
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk throughput dropped on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'The median throughput of the last runs of profile {{ $labels.profile }} is {{ $value | humanize1024 }}B/s, less than %s of its 7-day baseline.' % share(c.throughputDropRatio),
        },
      }),
      // Durability profiles (fsync or fdatasync after each write, e.g. etcd-wal): the exact p99 of
      // each run's syncs above 10 ms, etcd's hardware guidance for fdatasync, in every run seen
      // over 15 minutes (four runs in a row at the default 5-minute interval): one slow run does
      // not page. The window, not `for:`, holds the 15 minutes, so that a fast run in between
      // clears it however the evaluations fall. An absolute limit, not a regression from a
      // baseline: a disk that was always this slow is unfit for a write-ahead log too.
      alert('DiskprobeSyncLatencyHigh', {
        expr: 'max without (stat) (min_over_time(%s[15m])) > %s' % [
          s.sel('diskprobe_probe_sync_latency_seconds', ['stat="p99"']),
          c.syncLatencyP99Seconds,
        ],
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Slow syncs on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'The p99 sync latency of profile {{ $labels.profile }} has been above %g ms in every run for 15 minutes (at least {{ $value | humanizeDuration }}); etcd and other write-ahead logs wait for it on every commit.' % (c.syncLatencyP99Seconds * 1000),
        },
      }),
    ],
  }]
