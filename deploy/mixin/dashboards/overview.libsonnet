// The fleet overview: every agent at once, within query limits on a fleet.
local g = import '../lib/dashboards.libsonnet';

function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local sel(metric, extra=[]) = s.panel(metric, ['instance=~"$instance"'] + extra);
  // A pair's current value (rules/current.libsonnet: the 30-minute median of targets probed at
  // least every `currentMaxIntervalSeconds`, the 3-hour one of those probed at least hourly; one or the other).
  local current(record) = '(%s or %s)' % [
    sel('diskprobe:%s:median_30m' % record),
    sel('diskprobe:%s:median_3h' % record),
  ];
  // ... relative to its baseline.
  local againstBaseline(record) = '%s / last_over_time(%s[2h])' % [
    current(record),
    sel('diskprobe:%s:baseline_7d' % record),
  ];
  local pairLegend = '{{%s}} {{instance}} {{target}} {{profile}}' % c.clusterLabel;
  local pair = s.by(['job', 'instance', 'target', 'profile']);
  local count(id, title, description, expr, color) =
    g.panel(id, 'stat', title, description, 6, 4, [g.query('A', expr, instant=true)])
    + { options: { reduceOptions: { calcs: ['lastNotNull'] }, graphMode: 'none' } }
    + g.unit('none')
    + (if color == null then {} else g.threshold(1, color) + { options+: { colorMode: 'background' } });
  local runs(results) = 'sum by (%s) (increase(%s[1h]))' % [
    s.by(['job', 'instance', 'target']),
    sel('diskprobe_probe_runs_total', ['result=~"%s"' % results]),
  ];
  g.dashboard(
    c,
    'overview',
    'Fleet overview',
    'Every agent at once, within query limits on a fleet: counts, the worst pairs of the recording rules (ranked once over the time range, so a graph holds its k series), and fleet-wide distributions. Raw per-target series are read only by instant queries. Every table opens a row in the target dashboard.',
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
        'The 20 target × profile pairs whose current p99 (the median of the last 30 minutes of runs; of 3 hours for targets probed less often than every %d s) is highest relative to their 7-day baseline (the ratio DiskprobeLatencyRegression fires above %g). Recording rules: one sample per pair.' % [c.currentMaxIntervalSeconds, c.latencyRegressionRatio],
        12, 9,
        [g.query('A', 'topk(20, %s)' % againstBaseline('probe_latency_p99'), instant=true, format='table')],
      ) + g.unit('short') + g.organize(['Time'], 'x baseline') + g.targetLink(c, ['instance', 'target', 'profile']),
      g.panel(
        6, 'table', 'Highest failure share (last hour)',
        'The 20 targets with the highest share of failed or timed-out runs in the last hour (DiskprobeProbeFailing fires at %d of the last 10 runs).' % c.probeFailingRuns,
        12, 9,
        [g.query('A', 'topk(20, %s / %s)' % [runs('error|timeout'), runs('success|error|timeout')], instant=true, format='table')],
      ) + g.unit('percentunit') + g.organize(['Time'], 'failed') + g.targetLink(c, ['instance', 'target']),
      g.panel(
        7, 'timeseries', 'Top 10: p99 against baseline',
        'The current p99 relative to the baseline of the 10 pairs where it was highest at any point of the time range (ranked once, over the range; recording rules only, so it stays cheap on a fleet).',
        12, 8,
        [g.query('A', g.rankOnce('topk', 10, 'max', againstBaseline('probe_latency_p99'), pair), pairLegend)],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        8, 'timeseries', 'Fleet p99 of recent runs, by profile',
        "Fleet-wide distribution of each pair's current p99 (the median of its recent runs: 30 minutes, or 3 hours for targets probed less often): p50, p90 and max across pairs, per cluster and profile.",
        12, 8,
        local median = current('probe_latency_p99');
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
        'The current IOPS relative to the baseline of the 10 pairs where it was lowest at any point of the time range (ranked once, over the range; DiskprobeIOPSDrop fires below %g for small-block profiles).' % c.iopsDropRatio,
        12, 8,
        [g.query('A', g.rankOnce('bottomk', 10, 'min', againstBaseline('probe_iops'), pair), pairLegend)],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        10, 'timeseries', 'Bottom 10: throughput against baseline',
        'The current throughput relative to the baseline of the 10 pairs where it was lowest at any point of the time range (ranked once, over the range; DiskprobeThroughputDrop fires below %g for large-block profiles).' % c.throughputDropRatio,
        12, 8,
        [g.query('A', g.rankOnce('bottomk', 10, 'min', againstBaseline('probe_throughput_bytes_per_second'), pair), pairLegend)],
      ) + g.unit('short') + { interval: '5m' },
      g.panel(
        11, 'table', 'Slowest syncs (last run)',
        'The 20 durability profiles (fsync or fdatasync after writes, such as etcd-wal) whose last run had the highest p99 sync latency; DiskprobeSyncLatencyHigh fires when each of its last 3 runs is above %g ms. One instant sample per pair.' % (c.syncLatencyP99Seconds * 1000),
        12, 9,
        [g.query('A', 'topk(20, max without (stat) (%s))' % sel('diskprobe_probe_sync_latency_seconds', ['stat="p99"']), instant=true, format='table')],
      ) + g.unit('s') + g.organize(['Time'], 'sync p99') + g.targetLink(c, ['instance', 'target', 'profile']),
    ] + (import 'overview/peers.libsonnet')(c) + (import 'overview/headroom.libsonnet')(c) + (import 'overview/cloud.libsonnet')(c),
  )
