// "Baseline": once an hour, the hourly median of the per-run gauges, then the 7-day median of
// those. An evaluation reads ~120 raw samples (30 s scrapes) and 168 + 144 hourly samples per
// series.
function(c) [
  {
    name: 'diskprobe.baseline',
    interval: '1h',
    rules: [
      {
        record: 'diskprobe:probe_latency_p99:median_1h',
        expr: 'max without (stat) (quantile_over_time(0.5, diskprobe_probe_latency_seconds{stat="p99"}[1h])) > 0',
      },
      {
        record: 'diskprobe:probe_iops:median_1h',
        expr: 'quantile_over_time(0.5, diskprobe_probe_iops[1h]) > 0',
      },
      {
        record: 'diskprobe:probe_throughput_bytes_per_second:median_1h',
        expr: 'quantile_over_time(0.5, diskprobe_probe_throughput_bytes_per_second[1h]) > 0',
      },
      // A baseline needs a day of history: an hourly median between 8 and 1 days ago.
      {
        record: 'diskprobe:probe_latency_p99:baseline_7d',
        expr: |||
          quantile_over_time(0.5, diskprobe:probe_latency_p99:median_1h[7d]) > 0
            and last_over_time(diskprobe:probe_latency_p99:median_1h[7d] offset 1d)
        |||,
      },
      {
        record: 'diskprobe:probe_iops:baseline_7d',
        expr: |||
          quantile_over_time(0.5, diskprobe:probe_iops:median_1h[7d]) > 0
            and last_over_time(diskprobe:probe_iops:median_1h[7d] offset 1d)
        |||,
      },
      {
        record: 'diskprobe:probe_throughput_bytes_per_second:baseline_7d',
        expr: |||
          quantile_over_time(0.5, diskprobe:probe_throughput_bytes_per_second:median_1h[7d]) > 0
            and last_over_time(diskprobe:probe_throughput_bytes_per_second:median_1h[7d] offset 1d)
        |||,
      },
    ],
  },
]
