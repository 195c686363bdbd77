// "Current": the median of the 5-minute samples (diskprobe.fleet.sample's `:last` recordings) of
// the last few runs, so that one slow run moves it not at all: over the last 30 minutes for
// targets probed at least every `currentMaxIntervalSeconds` (diskprobe_target_interval_seconds;
// 5 runs or more), over the last 3 hours for targets probed at least hourly
// (`currentSlowMaxIntervalSeconds`; 3 runs or more). Targets probed less often have the daily
// medians only (rules/baseline.libsonnet).
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local target = s.by(['job', 'instance', 'target']);
  local interval = 'max by (%s) (%s)' % [target, s.sel('diskprobe_target_interval_seconds')];
  local median(record, window, filter) = {
    record: 'diskprobe:%s:median_%s' % [record, window],
    expr: |||
      quantile_over_time(0.5, %s[%s])
        and on (%s) %s
    ||| % [s.sel('diskprobe:%s:last' % record), window, target, filter],
  };
  local fast = '%s <= %s' % [interval, c.currentMaxIntervalSeconds];
  local slow = '(%s > %s) <= %s' % [interval, c.currentMaxIntervalSeconds, c.currentSlowMaxIntervalSeconds];
  [{
    name: 'diskprobe.current',
    interval: '5m',
    rules: [
      median('probe_latency_p99', '30m', fast),
      median('probe_iops', '30m', fast),
      median('probe_throughput_bytes_per_second', '30m', fast),
      median('probe_latency_p99', '3h', slow),
      median('probe_iops', '3h', slow),
      median('probe_throughput_bytes_per_second', '3h', slow),
    ],
  }]
