// The fleet overview: every agent at once, within query limits on a fleet.
local g = import '../lib/dashboards.libsonnet';

function(c)
  local sel = 'job=~"$job",instance=~"$instance"';
  local count(id, title, description, expr, color) =
    g.panel(id, 'stat', title, description, 6, 4, [g.query('A', expr, instant=true)])
    + { options: { reduceOptions: { calcs: ['lastNotNull'] }, graphMode: 'none' } }
    + (if color == null then {} else g.threshold(1, color) + { options+: { colorMode: 'background' } });
  g.dashboard(
    c,
    'overview',
    'Fleet overview',
    'Every agent at once, within query limits on a fleet: counts, the worst pairs (topk/bottomk) of the recording rules, and fleet-wide distributions. Raw per-target series are read only by instant queries.',
    [
      g.datasourceVariable(c),
      g.labelVariable('job', 'Job', 'diskprobe_build_info', multi=true),
      g.labelVariable('instance', 'Instance', 'diskprobe_build_info{job=~"$job"}', multi=true),
    ],
    [
      count(1, 'Targets', 'Targets configured on the selected agents.',
            'count(diskprobe_target_info{%s}) or vector(0)' % sel, null),
      count(2, 'Failing profiles', 'Target × profile pairs whose last run failed.',
            'count(diskprobe_probe_success{%s} == 0) or vector(0)' % sel, 'red'),
      count(3, 'Agents down', 'Agents Prometheus cannot scrape.',
            'count(up{%s} == 0) or vector(0)' % sel, 'red'),
      count(4, 'Alerts firing', "diskprobe alerts firing now (from Prometheus' ALERTS series).",
            'count(ALERTS{alertname=~"Diskprobe.*",alertstate="firing",%s}) or vector(0)' % sel, 'orange'),
      g.panel(
        5, 'table', 'Worst latency against baseline (now)',
        'The 20 target × profile pairs whose median p99 of the last 30 minutes of runs is highest relative to their 7-day baseline (the ratio DiskprobeLatencyRegression fires above 2.5). Recording rules: one sample per pair.',
        12, 9,
        [g.query('A', 'topk(20, diskprobe:probe_latency_p99:median_30m{%s} / last_over_time(diskprobe:probe_latency_p99:baseline_7d{%s}[2h]))' % [sel, sel], instant=true, format='table')],
      ) + g.organize(['Time'], 'x baseline'),
      g.panel(
        6, 'table', 'Highest failure share (last hour)',
        'The 20 targets with the highest share of failed or timed-out runs in the last hour (DiskprobeProbeFailing fires above 25%).',
        12, 9,
        [g.query('A', 'topk(20, sum by (job, instance, target) (increase(diskprobe_probe_runs_total{%s,result=~"error|timeout"}[1h])) / sum by (job, instance, target) (increase(diskprobe_probe_runs_total{%s,result=~"success|error|timeout"}[1h])))' % [sel, sel], instant=true, format='table')],
      ) + g.unit('percentunit') + g.organize(['Time'], 'failed'),
      g.panel(
        7, 'timeseries', 'Top 10: p99 against baseline',
        'The 10 pairs with the highest median p99 relative to their baseline at each point in time (recording rules only, so it stays cheap on a fleet).',
        12, 8,
        [g.query('A', 'topk(10, diskprobe:probe_latency_p99:median_30m{%s} / last_over_time(diskprobe:probe_latency_p99:baseline_7d{%s}[2h]))' % [sel, sel], '{{instance}} {{target}} {{profile}}')],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        8, 'timeseries', 'Fleet p99 of recent runs, by profile',
        "Fleet-wide distribution of the median p99 of each pair's recent runs: p50, p90 and max across pairs, per profile.",
        12, 8,
        [
          g.query('A', 'quantile by (profile) (0.5, diskprobe:probe_latency_p99:median_30m{%s})' % sel, '{{profile}} p50 of pairs'),
          g.query('B', 'quantile by (profile) (0.9, diskprobe:probe_latency_p99:median_30m{%s})' % sel, '{{profile}} p90 of pairs'),
          g.query('C', 'max by (profile) (diskprobe:probe_latency_p99:median_30m{%s})' % sel, '{{profile}} max'),
        ],
      ) + g.unit('s') + { interval: '5m' },
      g.panel(
        9, 'timeseries', 'Bottom 10: IOPS against baseline',
        'The 10 pairs with the lowest median IOPS relative to their baseline (DiskprobeIOPSDrop fires below 0.5 for small-block profiles).',
        12, 8,
        [g.query('A', 'bottomk(10, diskprobe:probe_iops:median_30m{%s} / last_over_time(diskprobe:probe_iops:baseline_7d{%s}[2h]))' % [sel, sel], '{{instance}} {{target}} {{profile}}')],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        10, 'timeseries', 'Bottom 10: throughput against baseline',
        'The 10 pairs with the lowest median throughput relative to their baseline (DiskprobeThroughputDrop fires below 0.5 for large-block profiles).',
        12, 8,
        [g.query('A', 'bottomk(10, diskprobe:probe_throughput_bytes_per_second:median_30m{%s} / last_over_time(diskprobe:probe_throughput_bytes_per_second:baseline_7d{%s}[2h]))' % [sel, sel], '{{instance}} {{target}} {{profile}}')],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        11, 'table', 'Slowest syncs (last run)',
        'The 20 durability profiles (fsync or fdatasync after writes, such as etcd-wal) whose last run had the highest p99 sync latency; DiskprobeSyncLatencyHigh fires when every run for 15 minutes is above 10 ms. One instant sample per pair.',
        12, 9,
        [g.query('A', 'topk(20, max without (stat) (diskprobe_probe_sync_latency_seconds{%s,stat="p99"}))' % sel, instant=true, format='table')],
      ) + g.unit('s') + g.organize(['Time'], 'sync p99'),
    ],
  )
