// "Baseline": once an hour, the hourly median of the per-run gauges, then the 7-day median of
// those. An evaluation reads ~120 raw samples (30 s scrapes) and 168 + 144 hourly samples per
// series.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local hourly(record, selector) = {
    record: 'diskprobe:%s:median_1h' % record,
    expr: 'quantile_over_time(0.5, %s[1h]) > 0' % selector,
  };
  // A baseline needs a day of history: an hourly median between 8 and 1 days ago.
  local baseline(record) = {
    local hourly = s.sel('diskprobe:%s:median_1h' % record),
    record: 'diskprobe:%s:baseline_7d' % record,
    expr: |||
      quantile_over_time(0.5, %s[7d]) > 0
        and last_over_time(%s[7d] offset 1d)
    ||| % [hourly, hourly],
  };
  [{
    name: 'diskprobe.baseline',
    interval: '1h',
    rules: [
      {
        record: 'diskprobe:probe_latency_p99:median_1h',
        expr: 'max without (stat) (quantile_over_time(0.5, %s[1h])) > 0'
              % s.sel('diskprobe_probe_latency_seconds', ['stat="p99"']),
      },
      hourly('probe_iops', s.sel('diskprobe_probe_iops')),
      hourly('probe_throughput_bytes_per_second', s.sel('diskprobe_probe_throughput_bytes_per_second')),
      baseline('probe_latency_p99'),
      baseline('probe_iops'),
      baseline('probe_throughput_bytes_per_second'),
    ],
  }]
