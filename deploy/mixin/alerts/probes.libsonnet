// What the probes measure: latency, IOPS, throughput and sync latency against their limits.
function(c) [
  {
    name: 'diskprobe.alerts',
    rules: [
      {
        alert: 'DiskprobeLatencyRegression',
        // The median p99 of the last runs is more than 2.5x the target's own baseline and at least
        // 100 us above it (the delta scales with the baseline: NVMe 150 us -> 600 us fires, HDD
        // 13 ms -> 54 ms fires; a 30 us device moving to 90 us does not). Latency profiles only:
        // a deep uncapped queue's latency is its IOPS (Little's law), watched by the IOPS and
        // throughput alerts.
        expr: |||
          (
            diskprobe:probe_latency_p99:median_30m
              > 2.5 * last_over_time(diskprobe:probe_latency_p99:baseline_7d[2h])
          )
          and (
            diskprobe:probe_latency_p99:median_30m
              - last_over_time(diskprobe:probe_latency_p99:baseline_7d[2h])
              > 0.0001
          )
          unless on (job, instance, target, profile) diskprobe_profile_info{iodepth!="1", rate_iops="0"}
        |||,
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk latency regression on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'The median p99 latency of the last runs of profile {{ $labels.profile }} is {{ $value | humanizeDuration }}, more than 2.5x its 7-day baseline.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobelatencyregression',
        },
      },
      {
        alert: 'DiskprobeIOPSDrop',
        // Small-block (< 100,000 bytes), uncapped profiles deeper than 1: IOPS under half its baseline.
        expr: |||
          diskprobe:probe_iops:median_30m
            < 0.5 * last_over_time(diskprobe:probe_iops:baseline_7d[2h])
          and on (job, instance, target, profile) diskprobe_profile_info{block_size=~"[0-9]{1,5}", iodepth!="1", rate_iops="0"}
        |||,
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk IOPS dropped on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'The median IOPS of the last runs of profile {{ $labels.profile }} is {{ $value | humanize }}, less than half of its 7-day baseline.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobeiopsdrop',
        },
      },
      {
        alert: 'DiskprobeThroughputDrop',
        // Large-block (>= 100,000 bytes), uncapped profiles deeper than 1: throughput under half its baseline.
        expr: |||
          diskprobe:probe_throughput_bytes_per_second:median_30m
            < 0.5 * last_over_time(diskprobe:probe_throughput_bytes_per_second:baseline_7d[2h])
          and on (job, instance, target, profile) diskprobe_profile_info{block_size=~"[0-9]{6,}", iodepth!="1", rate_iops="0"}
        |||,
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk throughput dropped on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'The median throughput of the last runs of profile {{ $labels.profile }} is {{ $value | humanize1024 }}B/s, less than half of its 7-day baseline.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobethroughputdrop',
        },
      },
      {
        alert: 'DiskprobeSyncLatencyHigh',
        // Durability profiles (fsync or fdatasync after each write, e.g. etcd-wal): the exact p99 of
        // each run's syncs above 10 ms, etcd's hardware guidance for fdatasync, in every run seen
        // over 15 minutes (four runs in a row at the default 5-minute interval): one slow run does
        // not page. The window, not `for:`, holds the 15 minutes, so that a fast run in between
        // clears it however the evaluations fall. An absolute limit, not a regression from a
        // baseline: a disk that was always this slow is unfit for a write-ahead log too.
        expr: 'max without (stat) (min_over_time(diskprobe_probe_sync_latency_seconds{stat="p99"}[15m])) > 0.01',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Slow syncs on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'The p99 sync latency of profile {{ $labels.profile }} has been above 10 ms in every run for 15 minutes (at least {{ $value | humanizeDuration }}); etcd and other write-ahead logs wait for it on every commit.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobesynclatencyhigh',
        },
      },
    ],
  },
]
