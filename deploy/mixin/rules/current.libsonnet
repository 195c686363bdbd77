// "Current": the median of the 5-minute samples of the last 30 minutes (diskprobe.fleet.sample's
// `:last` recordings): one slow run moves it not at all. Only for targets probed at least every
// `currentMaxIntervalSeconds` (diskprobe_target_interval_seconds), whose 30 minutes hold at
// least 5 runs.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local target = s.by(['job', 'instance', 'target']);
  local median(record) = {
    record: 'diskprobe:%s:median_30m' % record,
    expr: |||
      quantile_over_time(0.5, %s[30m])
        and on (%s) max by (%s) (%s) <= %s
    ||| % [
      s.sel('diskprobe:%s:last' % record),
      target,
      target,
      s.sel('diskprobe_target_interval_seconds'),
      c.currentMaxIntervalSeconds,
    ],
  };
  [{
    name: 'diskprobe.current',
    interval: '5m',
    rules: [
      median('probe_latency_p99'),
      median('probe_iops'),
      median('probe_throughput_bytes_per_second'),
    ],
  }]
