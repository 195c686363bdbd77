// The fleet overview: every agent at once, within query limits on a fleet.
local g = import '../lib/dashboards.libsonnet';

function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local sel(metric, extra=[]) = s.panel(metric, ['instance=~"$instance"'] + extra);
  local count(id, title, description, expr, color) =
    g.panel(id, 'stat', title, description, 6, 4, [g.query('A', expr, instant=true)])
    + { options: { reduceOptions: { calcs: ['lastNotNull'] }, graphMode: 'none' } }
    + (if color == null then {} else g.threshold(1, color) + { options+: { colorMode: 'background' } });
  // A recording rule's current value relative to its baseline, per pair.
  local againstBaseline(record) = '%s / last_over_time(%s[2h])' % [
    sel('diskprobe:%s:median_30m' % record),
    sel('diskprobe:%s:baseline_7d' % record),
  ];
  local pairLegend = '{{%s}} {{instance}} {{target}} {{profile}}' % c.clusterLabel;
  local runs(results) = 'sum by (%s) (increase(%s[1h]))' % [
    s.by(['job', 'instance', 'target']),
    sel('diskprobe_probe_runs_total', ['result=~"%s"' % results]),
  ];
  g.dashboard(
    c,
    'overview',
    'Fleet overview',
    'Every agent at once, within query limits on a fleet: counts, the worst pairs (topk/bottomk) of the recording rules, and fleet-wide distributions. Raw per-target series are read only by instant queries.',
    [
      g.datasourceVariable(c),
      g.clusterVariable(c),
      g.labelVariable('instance', 'Instance', s.panel('diskprobe_build_info'), multi=true),
    ],
    [
      count(1, 'Targets', 'Targets configured on the selected agents.',
            'count(%s) or vector(0)' % sel('diskprobe_target_info'), null),
      count(2, 'Failing profiles', 'Target × profile pairs whose last run failed.',
            'count(%s == 0) or vector(0)' % sel('diskprobe_probe_success'), 'red'),
      count(3, 'Agents down', 'Agents Prometheus cannot scrape.',
            'count(%s == 0) or vector(0)' % sel('up'), 'red'),
      count(4, 'Alerts firing', "diskprobe alerts firing now (from Prometheus' ALERTS series).",
            'count(%s) or vector(0)' % sel('ALERTS', ['alertname=~"Diskprobe.*"', 'alertstate="firing"']), 'orange'),
      g.panel(
        5, 'table', 'Worst latency against baseline (now)',
        'The 20 target × profile pairs whose median p99 of the last 30 minutes of runs is highest relative to their 7-day baseline (the ratio DiskprobeLatencyRegression fires above %g). Recording rules: one sample per pair.' % c.latencyRegressionRatio,
        12, 9,
        [g.query('A', 'topk(20, %s)' % againstBaseline('probe_latency_p99'), instant=true, format='table')],
      ) + g.organize(['Time'], 'x baseline'),
      g.panel(
        6, 'table', 'Highest failure share (last hour)',
        'The 20 targets with the highest share of failed or timed-out runs in the last hour (DiskprobeProbeFailing fires at %d of the last 10 runs).' % c.probeFailingRuns,
        12, 9,
        [g.query('A', 'topk(20, %s / %s)' % [runs('error|timeout'), runs('success|error|timeout')], instant=true, format='table')],
      ) + g.unit('percentunit') + g.organize(['Time'], 'failed'),
      g.panel(
        7, 'timeseries', 'Top 10: p99 against baseline',
        'The 10 pairs with the highest median p99 relative to their baseline at each point in time (recording rules only, so it stays cheap on a fleet).',
        12, 8,
        [g.query('A', 'topk(10, %s)' % againstBaseline('probe_latency_p99'), pairLegend)],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        8, 'timeseries', 'Fleet p99 of recent runs, by profile',
        "Fleet-wide distribution of the median p99 of each pair's recent runs: p50, p90 and max across pairs, per cluster and profile.",
        12, 8,
        local median = sel('diskprobe:probe_latency_p99:median_30m');
        local byProfile = s.by(['profile']);
        local legend(what) = '{{%s}} {{profile}} %s' % [c.clusterLabel, what];
        [
          g.query('A', 'quantile by (%s) (0.5, %s)' % [byProfile, median], legend('p50 of pairs')),
          g.query('B', 'quantile by (%s) (0.9, %s)' % [byProfile, median], legend('p90 of pairs')),
          g.query('C', 'max by (%s) (%s)' % [byProfile, median], legend('max')),
        ],
      ) + g.unit('s') + { interval: '5m' },
      g.panel(
        9, 'timeseries', 'Bottom 10: IOPS against baseline',
        'The 10 pairs with the lowest median IOPS relative to their baseline (DiskprobeIOPSDrop fires below %g for small-block profiles).' % c.iopsDropRatio,
        12, 8,
        [g.query('A', 'bottomk(10, %s)' % againstBaseline('probe_iops'), pairLegend)],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        10, 'timeseries', 'Bottom 10: throughput against baseline',
        'The 10 pairs with the lowest median throughput relative to their baseline (DiskprobeThroughputDrop fires below %g for large-block profiles).' % c.throughputDropRatio,
        12, 8,
        [g.query('A', 'bottomk(10, %s)' % againstBaseline('probe_throughput_bytes_per_second'), pairLegend)],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        11, 'table', 'Slowest syncs (last run)',
        'The 20 durability profiles (fsync or fdatasync after writes, such as etcd-wal) whose last run had the highest p99 sync latency; DiskprobeSyncLatencyHigh fires when each of its last 3 runs is above %g ms. One instant sample per pair.' % (c.syncLatencyP99Seconds * 1000),
        12, 9,
        [g.query('A', 'topk(20, max without (stat) (%s))' % sel('diskprobe_probe_sync_latency_seconds', ['stat="p99"']), instant=true, format='table')],
      ) + g.unit('s') + g.organize(['Time'], 'sync p99'),
    ] + (import 'overview/peers.libsonnet')(c) + (import 'overview/headroom.libsonnet')(c) + (import 'overview/cloud.libsonnet')(c),
  )
