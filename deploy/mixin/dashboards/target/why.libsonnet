// The target dashboard's "why it fired" row: for the selected target, over time, the recorded
// numbers each alert about its runs against their history, its peers and its limits decides on,
// with the alert's thresholds from the configuration. Recording rules only (the alerts on the
// agent's own series, such as failures, errors and sync latency, are the probes and durability
// rows'); one panel per alert, in the order an on-call reads them.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local target = ['instance=~"$instance"', 'target=~"$target"'];
  local sel(metric, extra=[]) = s.panel(metric, target + ['profile=~"$profile"'] + extra);
  // Lines at `levels` (value -> color), drawn on the graph.
  local lines(levels) = { fieldConfig+: { defaults+: {
    thresholds: {
      mode: 'absolute',
      steps: [{ color: 'green', value: null }] + [
        { color: l[1], value: l[0] }
        for l in std.sort(levels, function(l) l[0])
      ],
    },
    custom: { thresholdsStyle: { mode: 'line' } },
  } } };
  // A recording's current value over its 7-day baseline, as the drop and regression alerts read
  // them (rules/current.libsonnet and rules/baseline.libsonnet).
  local recent(record) = '(last_over_time(%s[10m]) or last_over_time(%s[10m])) / last_over_time(%s[2h])' % [
    sel('diskprobe:%s:median_30m' % record),
    sel('diskprobe:%s:median_3h' % record),
    sel('diskprobe:%s:baseline_7d' % record),
  ];
  local day(record) = 'last_over_time(%s[2h]) / last_over_time(%s[2h])' % [
    sel('diskprobe:%s:median_1d' % record),
    sel('diskprobe:%s:baseline_7d' % record),
  ];
  local read(record) = 'last_over_time(%s[1h])' % sel(record);
  local drop(id, alert, record, what, ratio, profiles) = g.panel(
    id, 'timeseries', '%s: %s against its baseline' % [alert, what],
    "The current %s of each profile (the median of its recent runs) and that of the last day, over the 7-day baseline: %s fires below %g, or at %g for the day, for %s profiles, unless the disk is judged against its peers." % [what, alert, ratio, ratio, profiles],
    8, 8,
    [
      g.query('A', recent(record), '{{profile}} recent / baseline'),
      g.query('B', day(record), '{{profile}} last day / baseline'),
    ],
  ) + g.unit('short') + lines([[ratio, 'red']]);
  [
    g.row(70, 'Why it fired: what the alerts decide on'),
    g.panel(
      71, 'timeseries', 'DiskprobeLatencyRegression: p99 against its baseline',
      "The current p99 of each profile (the median of its recent runs) and that of the last day, over the 7-day baseline: DiskprobeLatencyRegression fires at %gx (and %g ms above it) for the recent runs, or at %gx for the day, for QD1 and rate-capped profiles, unless the disk is judged against its peers." % [c.latencyRegressionRatio, c.latencyRegressionMinDeltaSeconds * 1000, c.latencyDriftRatio],
      8, 8,
      [
        g.query('A', recent('probe_latency_p99'), '{{profile}} recent / baseline'),
        g.query('B', day('probe_latency_p99'), '{{profile}} last day / baseline'),
      ],
    ) + g.unit('short') + lines([[c.latencyDriftRatio, 'orange'], [c.latencyRegressionRatio, 'red']]),
    drop(72, 'DiskprobeIOPSDrop', 'probe_iops', 'IOPS', c.iopsDropRatio, 'small-block'),
    drop(73, 'DiskprobeThroughputDrop', 'probe_throughput_bytes_per_second', 'throughput', c.throughputDropRatio, 'large-block'),
    g.panel(
      74, 'timeseries', 'DiskprobeSlowerThanPeers: ratio to its peers',
      "Over the last %s, the median of this disk's p99 over its cohort's median, and its 80th percentile: DiskprobeSlowerThanPeers fires at %g for the median, or at %g for the 80th percentile when it is also %gx the median, each while the disk's peer score is above %g (the next panel), for %s, unless the disk is %gx busier than its peers." % [c.peerWindow, c.peerRatio, c.peerIntermittentRatio, c.peerIntermittentSpread, c.peerScore, c.peerFor, c.peerBusyRatio],
      8, 8,
      [
        g.query('A', read('diskprobe:probe_latency_p99:peer_ratio_median_12h'), '{{profile}} median ratio, %s' % c.peerWindow),
        g.query('B', read('diskprobe:probe_latency_p99:peer_ratio_p80_12h'), '{{profile}} p80 ratio, %s' % c.peerWindow),
      ],
    ) + g.unit('short') + lines([[c.peerRatio, 'red'], [c.peerIntermittentRatio, 'orange']]) + { interval: '5m' },
    g.panel(
      75, 'timeseries', 'DiskprobeSlowerThanPeers: peer score',
      "The modified z-score of this disk's median and 80th-percentile ratios among its cohort's disks: DiskprobeSlowerThanPeers needs it above %g." % c.peerScore,
      8, 8,
      [
        g.query('A', read('diskprobe:probe_latency_p99:peer_score_median_12h'), '{{profile}} score of the median ratio'),
        g.query('B', read('diskprobe:probe_latency_p99:peer_score_p80_12h'), '{{profile}} score of the p80 ratio'),
      ],
    ) + g.unit('short') + lines([[c.peerScore, 'red']]) + { interval: '5m' },
    g.panel(
      76, 'timeseries', 'DiskprobeFarSlowerThanPeers: ratio to its peers, %s' % c.peerFastWindow,
      "The median over %s of this disk's p99 over its cohort's median, and of its workload over its cohort's: DiskprobeFarSlowerThanPeers fires at %g for %s, unless the workload's is %g or more." % [c.peerFastWindow, c.peerFastRatio, c.peerFastFor, c.peerBusyRatio],
      8, 8,
      [
        g.query('A', 'quantile_over_time(0.5, %s[%s])' % [sel('diskprobe:probe_latency_p99:peer_ratio'), c.peerFastWindow], '{{profile}} p99 ratio'),
        g.query('B', 'quantile_over_time(0.5, %s[%s])' % [s.panel('diskprobe:target_disk_ios:peer_ratio', target), c.peerFastWindow], 'workload ratio'),
      ],
    ) + g.unit('short') + lines([[c.peerBusyRatio, 'orange'], [c.peerFastRatio, 'red']]) + { interval: '5m' },
    g.panel(
      77, 'timeseries', 'DiskprobeNearLimit and DiskprobeThrottled: share of the limits in use',
      "The workload's share of each declared limit of the disks under the target, and of the node's ceiling (limits measured by capacity probes are shown in the headroom row, and page no one): DiskprobeNearLimit fires at %g%% for %s; DiskprobeThrottled when a disk is there and its gentle probe's p99 is above its throttled level (the headroom row) for %s, or when its cloud statistics say it spent %g%% of the time over a limit (the cloud row)." % [c.headroomNearLimitShare * 100, c.headroomNearLimitFor, c.headroomThrottledFor, c.cloudThrottledShare * 100],
      16, 8,
      [
        g.query('A', '%s and on (%s) %s' % [
          s.panel('diskprobe:disk_limit_consumed:ratio_rate4m', ['instance=~"$instance"', 'source!="probe"']),
          s.by(['job', 'instance', 'device']),
          s.panel('diskprobe_target_disk_info', target),
        ], '{{device}} {{limit}} ({{source}})'),
        g.query('B', s.panel('diskprobe:node_limit_consumed:ratio_rate4m', ['instance=~"$instance"']), 'node {{limit}} ({{source}})'),
      ],
    ) + g.unit('percentunit') + lines([[c.headroomNearLimitShare, 'red']]),
  ]
