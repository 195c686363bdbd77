// "Baseline", once an hour, for every target, with or without a cohort: only the alerts choose
// between a disk's peers and its own history, so that a cohort that shrinks below
// `cohortMinSize` hands its members over to a baseline learned before it shrank. The hourly
// median of the 5-minute samples, the daily median of those (once the target has 20 hours of
// history), and the baseline: the best daily median of the last 7 days (a floor for latency, a ceiling for IOPS and throughput), which a slow drift
// cannot drag along. The same for each cohort's median, for its cohort-wide alert. Each step is a
// group of its own (diskprobe.baseline, .daily, .weekly), reading the one before through a window
// that holds its last evaluation.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local hourly(record) = {
    record: 'diskprobe:%s:median_1h' % record,
    expr: 'quantile_over_time(0.5, %s[1h])' % s.sel('diskprobe:%s:last' % record),
  };
  local dailyOf(record, hourly) = |||
    quantile_over_time(0.5, %s[1d])
      and last_over_time(%s[1h] offset 20h)
  ||| % [s.sel(hourly), s.sel(hourly)];
  local daily(record) = {
    record: 'diskprobe:%s:median_1d' % record,
    expr: dailyOf(record, 'diskprobe:%s:median_1h' % record),
  };
  // The daily medians at each midnight (UTC) of the last 7 days: the best of them.
  local best(fn, daily) = '%s(last_over_time(%s[2h])[7d:1d])' % [fn, s.sel(daily)];
  local baseline(record, fn) = {
    record: 'diskprobe:%s:baseline_7d' % record,
    expr: best(fn, 'diskprobe:%s:median_1d' % record),
  };
  [
    {
      name: 'diskprobe.baseline',
      interval: '1h',
      rules: [
        hourly('probe_latency_p99'),
        hourly('probe_iops'),
        hourly('probe_throughput_bytes_per_second'),
      ],
    },
    {
      name: 'diskprobe.baseline.daily',
      interval: '1h',
      rules: [
        daily('probe_latency_p99'),
        daily('probe_iops'),
        daily('probe_throughput_bytes_per_second'),
        {
          record: 'diskprobe_cohort:probe_latency_p99:median_1d',
          expr: dailyOf('', 'diskprobe_cohort:probe_latency_p99:median'),
        },
      ],
    },
    {
      name: 'diskprobe.baseline.weekly',
      interval: '1h',
      rules: [
        baseline('probe_latency_p99', 'min_over_time'),
        baseline('probe_iops', 'max_over_time'),
        baseline('probe_throughput_bytes_per_second', 'max_over_time'),
        {
          record: 'diskprobe_cohort:probe_latency_p99:baseline_7d',
          expr: best('min_over_time', 'diskprobe_cohort:probe_latency_p99:median_1d'),
        },
      ],
    },
  ]
