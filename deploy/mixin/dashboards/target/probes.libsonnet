// The target dashboard's probe row: latency, IOPS, throughput and runs of each profile.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local sel = 'job=~"$job",instance=~"$instance",target=~"$target",profile=~"$profile"';
  local histogramQuantile(q) =
    'histogram_quantile(%s, sum by (profile) (rate(diskprobe_io_latency_seconds{%s}[$__rate_interval]))) or histogram_quantile(%s, sum by (profile, le) (rate(diskprobe_io_latency_seconds_bucket{%s}[$__rate_interval])))' % [q, sel, q, sel];
  [
    g.row(1, 'Probes'),
    g.panel(
      2, 'heatmap', 'Latency heatmap: $profile',
      'Per-I/O latency of one profile (one panel per profile), from the histogram: increase over windows of at least two probe intervals ($probe_window), so every column holds runs. Query A reads the native histogram; query B the classic buckets where there is no native histogram.',
      24, 9,
      [
        g.query('A', 'sum(increase(diskprobe_io_latency_seconds{%s}[$__interval]))' % sel, 'native', format='heatmap'),
        g.query('B', 'sum by (le) (increase(diskprobe_io_latency_seconds_bucket{%s}[$__interval])) unless on () count(histogram_count(diskprobe_io_latency_seconds{%s}))' % [sel, sel], '{{le}}', format='heatmap'),
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
      [g.query('A', 'diskprobe_probe_latency_seconds{%s,stat=~"p50|p99|p99.9"}' % sel, '{{profile}} {{stat}}')],
    ) + g.unit('s'),
    g.panel(
      4, 'timeseries', 'p99 of recent runs and its baseline',
      'What DiskprobeLatencyRegression compares: the median p99 of the last 30 minutes of runs, and the 7-day baseline (recording rules of deploy/prometheus/rules.yml).',
      12, 8,
      [
        g.query('A', 'diskprobe:probe_latency_p99:median_30m{%s}' % sel, '{{profile}} median p99, 30m'),
        g.query('B', 'last_over_time(diskprobe:probe_latency_p99:baseline_7d{%s}[2h])' % sel, '{{profile}} baseline'),
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
      [g.query('A', 'diskprobe_probe_iops{%s}' % sel, '{{profile}}')],
    ) + g.unit('iops'),
    g.panel(
      7, 'timeseries', 'Throughput per profile (last run)',
      'Bytes per second of each run.',
      12, 8,
      [g.query('A', 'diskprobe_probe_throughput_bytes_per_second{%s}' % sel, '{{profile}}')],
    ) + g.unit('Bps'),
    g.panel(
      8, 'timeseries', 'IOPS while probing',
      'I/Os completed divided by the time spent issuing them, over windows of at least two probe intervals.',
      12, 8,
      [g.query('A', 'sum by (profile) (increase(diskprobe_ios_total{%s}[$__rate_interval])) / sum by (profile) (increase(diskprobe_probe_busy_seconds_total{%s}[$__rate_interval]))' % [sel, sel], '{{profile}}')],
    ) + g.unit('iops') + { interval: '$probe_window' },
    g.panel(
      9, 'timeseries', 'Runs by result',
      'Runs finished per window of at least two probe intervals, by result.',
      12, 8,
      [g.query('A', 'sum by (result) (increase(diskprobe_probe_runs_total{%s}[$__interval]))' % sel, '{{result}}')],
    ) + g.unit('short') + {
      fieldConfig+: { defaults+: { custom: { drawStyle: 'bars', stacking: { mode: 'normal', group: 'A' } } } },
      interval: '$probe_window',
    },
    g.panel(
      10, 'timeseries', 'Run duration (last run)',
      'Wall time of each run, including opening the target.',
      12, 8,
      [g.query('A', 'diskprobe_probe_duration_seconds{%s}' % sel, '{{profile}}')],
    ) + g.unit('s'),
    g.panel(
      11, 'table', 'Profiles',
      'What each profile does (diskprobe_profile_info): the alert rules tell latency, IOPS and throughput profiles apart by these.',
      12, 8,
      [g.query('A', 'diskprobe_profile_info{%s}' % sel, instant=true, format='table')],
    ) + g.organize(['Time', 'Value', '__name__', 'job', 'instance']),
    g.panel(
      12, 'table', 'Target',
      'Where the target lives (diskprobe_target_info) and its configured interval.',
      24, 8,
      [g.query('A', 'diskprobe_target_info{job=~"$job",instance=~"$instance",target=~"$target"}', instant=true, format='table')],
    ) + g.organize(['Time', 'Value', '__name__']),
  ]
