// "Current": the median of the per-run gauges over the last 30 minutes of runs, recorded when the
// window holds at least 5 runs (the last-run timestamp changed at least 4 times): one slow run
// is one of five or six values and cannot move a median.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local enoughRuns = 'and on (%s) changes(%s[30m]) >= 4' % [
    s.by(['job', 'instance', 'target', 'profile']),
    s.sel('diskprobe_probe_last_run_timestamp_seconds'),
  ];
  [{
    name: 'diskprobe.current',
    rules: [
      {
        record: 'diskprobe:probe_latency_p99:median_30m',
        expr: |||
          max without (stat) (quantile_over_time(0.5, %s[30m]))
            %s
        ||| % [s.sel('diskprobe_probe_latency_seconds', ['stat="p99"']), enoughRuns],
      },
      {
        record: 'diskprobe:probe_iops:median_30m',
        expr: |||
          quantile_over_time(0.5, %s[30m])
            %s
        ||| % [s.sel('diskprobe_probe_iops'), enoughRuns],
      },
      {
        record: 'diskprobe:probe_throughput_bytes_per_second:median_30m',
        expr: |||
          quantile_over_time(0.5, %s[30m])
            %s
        ||| % [s.sel('diskprobe_probe_throughput_bytes_per_second'), enoughRuns],
      },
    ],
  }]
