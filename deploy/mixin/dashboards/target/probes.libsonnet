// The target dashboard's probe row: latency, IOPS, throughput and runs of each profile.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local target = ['instance=~"$instance"', 'target=~"$target"'];
  local sel(metric, extra=[]) = s.panel(metric, target + ['profile=~"$profile"'] + extra);
  // Native histogram where Prometheus keeps it, else the classic buckets.
  local histogramQuantile(q) =
    'histogram_quantile(%s, sum by (%s) (rate(%s[$__rate_interval]))) or histogram_quantile(%s, sum by (%s) (rate(%s[$__rate_interval])))' % [
      q, s.by(['profile']), sel('diskprobe_io_latency_seconds'),
      q, s.by(['profile', 'le']), sel('diskprobe_io_latency_seconds_bucket'),
    ];
  [
    g.row(1, 'Probes'),
    g.panel(
      2, 'heatmap', 'Latency heatmap: $profile',
      'Per-I/O latency of one profile (one panel per profile), from the histogram: increase over windows of at least two probe intervals ($probe_window), so every column holds runs. Query A reads the native histogram; query B the classic buckets where there is no native histogram.',
      24, 9,
      [
        g.query('A', 'sum by (%s) (increase(%s[$__interval]))' % [s.by([]), sel('diskprobe_io_latency_seconds')], 'native', format='heatmap'),
        // `count` of the native histogram, not of its `histogram_count`: both count it in
        // PromQL, and MetricsQL (VictoriaMetrics) has no `histogram_count`.
        g.query('B', 'sum by (%s) (increase(%s[$__interval])) unless on (%s) count by (%s) (%s)' % [
          s.by(['le']), sel('diskprobe_io_latency_seconds_bucket'),
          s.by([]), s.by([]), sel('diskprobe_io_latency_seconds'),
        ], '{{le}}', format='heatmap'),
      ],
    ) + {
      options: {
        calculate: false,
        yAxis: { unit: 's' },
        cellGap: 1,
        color: { scheme: 'Oranges', mode: 'scheme' },
      },
      interval: '$probe_window',
      repeat: 'profile',
      repeatDirection: 'h',
      maxPerRow: 2,
    },
    g.panel(
      3, 'timeseries', 'Latency percentiles (last run, exact)',
      'Exact percentiles of each run, from its HdrHistogram: one point per run, held until the next.',
      12, 8,
      [g.query('A', sel('diskprobe_probe_latency_seconds', ['stat=~"p50|p99|p99.9"']), '{{profile}} {{stat}}')],
    ) + g.unit('s'),
    g.panel(
      4, 'timeseries', 'p99 of recent runs and its baseline',
      'What DiskprobeLatencyRegression compares: the current p99 (the median of the last 30 minutes of runs; of 3 hours for targets probed less often than every %d s) and the 7-day baseline (recording rules of deploy/prometheus/rules.yml).' % c.currentMaxIntervalSeconds,
      12, 8,
      [
        g.query('A', '%s or %s' % [sel('diskprobe:probe_latency_p99:median_30m'), sel('diskprobe:probe_latency_p99:median_3h')], '{{profile}} current p99'),
        g.query('B', 'last_over_time(%s[2h])' % sel('diskprobe:probe_latency_p99:baseline_7d'), '{{profile}} baseline'),
      ],
    ) + g.unit('s'),
    g.panel(
      5, 'timeseries', 'Latency p50 / p99 (histogram)',
      'From the native histogram where Prometheus has it, else from the classic buckets, over windows of at least two probe intervals.',
      12, 8,
      [
        g.query('A', histogramQuantile('0.5'), '{{profile}} p50'),
        g.query('B', histogramQuantile('0.99'), '{{profile}} p99'),
      ],
    ) + g.unit('s') + { interval: '$probe_window' },
    g.panel(
      6, 'timeseries', 'IOPS per profile (last run)',
      'I/Os per second of each run (for rate-capped profiles: the cap).',
      12, 8,
      [g.query('A', sel('diskprobe_probe_iops'), '{{profile}}')],
    ) + g.unit('iops'),
    g.panel(
      7, 'timeseries', 'Throughput per profile (last run)',
      'Bytes per second of each run.',
      12, 8,
      [g.query('A', sel('diskprobe_probe_throughput_bytes_per_second'), '{{profile}}')],
    ) + g.unit('Bps'),
    g.panel(
      8, 'timeseries', 'IOPS while probing',
      'I/Os completed divided by the time spent issuing them, over windows of at least two probe intervals.',
      12, 8,
      [g.query('A', 'sum by (%s) (increase(%s[$__rate_interval])) / sum by (%s) (increase(%s[$__rate_interval]))' % [s.by(['profile']), sel('diskprobe_ios_total'), s.by(['profile']), sel('diskprobe_probe_busy_seconds_total')], '{{profile}}')],
    ) + g.unit('iops') + { interval: '$probe_window' },
    g.panel(
      9, 'timeseries', 'Runs by result',
      'Runs finished per window of at least two probe intervals, by result.',
      12, 8,
      [g.query('A', 'sum by (%s) (increase(%s[$__interval]))' % [s.by(['result']), sel('diskprobe_probe_runs_total')], '{{result}}')],
    ) + g.unit('short') + {
      fieldConfig+: { defaults+: { custom: { drawStyle: 'bars', stacking: { mode: 'normal', group: 'A' } } } },
      interval: '$probe_window',
    },
    g.panel(
      10, 'timeseries', 'Run duration (last run)',
      'Wall time of each run, including opening the target.',
      12, 8,
      [g.query('A', sel('diskprobe_probe_duration_seconds'), '{{profile}}')],
    ) + g.unit('s'),
    g.panel(
      11, 'table', 'Profiles',
      'What each profile does (diskprobe_profile_info): the alert rules tell latency, IOPS and throughput profiles apart by these.',
      12, 8,
      [g.query('A', sel('diskprobe_profile_info'), instant=true, format='table')],
    ) + g.organize(['Time', 'Value', '__name__', 'job', 'instance']) + g.targetLink(c, ['profile'], carry=['instance', 'target']),
    g.panel(
      12, 'table', 'Target',
      'Where the target lives (diskprobe_target_info) and its configured interval (diskprobe_target_interval_seconds).',
      24, 8,
      [
        g.query('A', s.panel('diskprobe_target_info', target), instant=true, format='table'),
        g.query('B', s.panel('diskprobe_target_interval_seconds', target), instant=true, format='table'),
      ],
    ) + g.mergedTable({ B: ['interval', 's'] }, ['Time', 'Value #A', '__name__']) + g.targetLink(c, ['instance', 'target'], carry=['device']),
  ]
