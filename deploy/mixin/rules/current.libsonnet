// "Current": the median of the per-run gauges over the last 30 minutes of runs.
function(c) [
  {
    name: 'diskprobe.current',
    rules: [
      // Median over the last 30 minutes of the per-run gauges, when the window holds at least 5
      // runs (the last-run timestamp changed at least 4 times).
      {
        record: 'diskprobe:probe_latency_p99:median_30m',
        expr: |||
          max without (stat) (quantile_over_time(0.5, diskprobe_probe_latency_seconds{stat="p99"}[30m]))
            and on (job, instance, target, profile) changes(diskprobe_probe_last_run_timestamp_seconds[30m]) >= 4
        |||,
      },
      {
        record: 'diskprobe:probe_iops:median_30m',
        expr: |||
          quantile_over_time(0.5, diskprobe_probe_iops[30m])
            and on (job, instance, target, profile) changes(diskprobe_probe_last_run_timestamp_seconds[30m]) >= 4
        |||,
      },
      {
        record: 'diskprobe:probe_throughput_bytes_per_second:median_30m',
        expr: |||
          quantile_over_time(0.5, diskprobe_probe_throughput_bytes_per_second[30m])
            and on (job, instance, target, profile) changes(diskprobe_probe_last_run_timestamp_seconds[30m]) >= 4
        |||,
      },
    ],
  },
]
