// What the probes measure: latency, IOPS, throughput and sync latency against their limits.
// Regressions from a target's own baseline apply to targets without a cohort of
// `cohortMinSize` only (the others: alerts/fleet.libsonnet); the value is the ratio.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local pair = s.by(['job', 'instance', 'target', 'profile']);
  local read(record, window) = 'last_over_time(%s[%s])' % [s.sel(record), window];
  // The median of the last runs: over 30 minutes, or over 3 hours for targets probed less often
  // (rules/current.libsonnet records one or the other).
  local current(record) = '(%s or %s)' % [
    read('diskprobe:%s:median_30m' % record, '10m'),
    read('diskprobe:%s:median_3h' % record, '10m'),
  ];
  local daily(record) = read('diskprobe:%s:median_1d' % record, '2h');
  local baseline(record) = read('diskprobe:%s:baseline_7d' % record, '2h');
  local withoutPeers = 'unless on (%s) %s' % [pair, read('diskprobe:probe_latency_p99:peer_ratio_median_12h', '1h')];
  // A share as words: 0.5 is "half", others a percentage.
  local share(r) = if r == 0.5 then 'half' else '%g%%' % (r * 100);
  local alert(name, rule) = { alert: name } + rule + { annotations+: s.runbook(name) };
  local sel = s.matchers('sel', ['job', 'instance', 'target', 'profile']);
  // An annotation's query of a recording at the alert's pair: its value through `fn`, or
  // `otherwise` when there is none.
  local value(record, window, fn, otherwise='', unit='') =
    '{{ with printf "last_over_time(%s{%%s}[%s])" $sel | query }}{{ . | first | value | %s }}%s%s{{ end }}'
    % [record, window, fn, unit, if otherwise == '' then '' else '{{ else }}' + otherwise];
  // The current median in words: "<value> over the last 30 minutes" (or 3 hours).
  local currentValue(record, fn, unit='') =
    value('diskprobe:%s:median_30m' % record, '10m', fn, otherwise=value(
      'diskprobe:%s:median_3h' % record, '10m', fn, 'unknown over the last 30 minutes', unit + ' over the last 3 hours'
    ), unit=unit + ' over the last 30 minutes');
  // How many members the target's cohort has (fewer than `cohortMinSize`, or it would be compared
  // with them), or that it has none.
  local cohortSize = std.join('', [
    s.matchers('target', ['job', 'instance', 'target']),
    s.matchers('cohortJob', ['job']),
    '{{ with printf "count(diskprobe:probe_latency_p99:last_in_cohort{%s,profile=%q} and on (',
    s.by(['job'] + [c.cohortLabel] + c.cohortDiskLabels),
    ') diskprobe:target_cohort:info{%s})" $cohortJob $labels.profile $target | query }}',
    'its cohort has fewer than %d members to compare with ({{ . | first | value }} with a last run)' % c.cohortMinSize,
    '{{ else }}it has no cohort of %d to compare with{{ end }}' % c.cohortMinSize,
  ]);
  // An IOPS or throughput drop: the median of the last 30 minutes under `ratio` of the
  // baseline, or that of the last day.
  local drop(record, ratio, profiles) = |||
    (
      %(current)s
        / %(baseline)s
        < %(ratio)s
      or
      %(daily)s
        / %(baseline)s
        <= %(ratio)s
    )
    and on (%(pair)s) %(profiles)s
    %(withoutPeers)s
  ||| % {
    current: current(record),
    daily: daily(record),
    baseline: baseline(record),
    ratio: ratio,
    pair: pair,
    profiles: s.sel('diskprobe_profile_info', profiles),
    withoutPeers: withoutPeers,
  };
  local dropDescription(what, record, humanize, unit, ratio) = std.join(' ', [
    sel,
    'The median %s of profile {{ $labels.profile }} is' % what,
    currentValue(record, humanize, unit) + ',',
    '{{ $value | printf "%%.2f" }}x its baseline (under %g fires) of' % ratio,
    value('diskprobe:%s:baseline_7d' % record, '2h', humanize, 'unknown', unit),
    '(its best daily median of the last 7 days);',
    cohortSize + '.',
  ]);
  [{
    name: 'diskprobe.alerts',
    rules: [
      // Either the median p99 of the last 30 minutes is more than 2.5x the target's baseline
      // (its best daily median of the last 7 days) and at least 100 us above it (a step: NVMe
      // 150 us -> 600 us, HDD 13 ms -> 54 ms), or the median of the last day is 2x the baseline
      // (a drift, whatever the daily cycle). Latency profiles only: a deep uncapped queue's
      // latency is its IOPS (Little's law), watched by the IOPS and throughput alerts.
      alert('DiskprobeLatencyRegression', {
        expr: |||
          (
            (
              %(current)s
                / %(baseline)s
                > %(ratio)s
            )
            and (
              %(current)s
                - %(baseline)s
                > %(delta)s
            )
            or
            %(daily)s
              / %(baseline)s
              >= %(drift)s
          )
          unless on (%(pair)s) %(info)s
          %(withoutPeers)s
        ||| % {
          current: current('probe_latency_p99'),
          daily: daily('probe_latency_p99'),
          baseline: baseline('probe_latency_p99'),
          ratio: c.latencyRegressionRatio,
          delta: c.latencyRegressionMinDeltaSeconds,
          drift: c.latencyDriftRatio,
          pair: pair,
          info: s.sel('diskprobe_profile_info', ['iodepth!="1"', 'rate_iops="0"']),
          withoutPeers: withoutPeers,
        },
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk latency regression on {{ $labels.instance }} {{ $labels.target }}',
          description: std.join(' ', [
            sel,
            'The median p99 latency of profile {{ $labels.profile }} is',
            currentValue('probe_latency_p99', 'humanizeDuration') + ' and',
            value('diskprobe:probe_latency_p99:median_1d', '2h', 'humanizeDuration', 'unknown') + ' over the last day,',
            '{{ $value | printf "%%.2f" }}x its baseline (more than %g and %g us above it, or %g over the day, fire) of' % [c.latencyRegressionRatio, c.latencyRegressionMinDeltaSeconds * 1e6, c.latencyDriftRatio],
            value('diskprobe:probe_latency_p99:baseline_7d', '2h', 'humanizeDuration', 'unknown'),
            '(its best daily median of the last 7 days);',
            cohortSize + '.',
          ]),
        },
      }),
      // Small-block (< 100,000 bytes), uncapped profiles deeper than 1.
      alert('DiskprobeIOPSDrop', {
        expr: drop('probe_iops', c.iopsDropRatio, ['block_size=~"[0-9]{1,5}"', 'iodepth!="1"', 'rate_iops="0"']),
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk IOPS dropped on {{ $labels.instance }} {{ $labels.target }}',
          description: dropDescription('IOPS', 'probe_iops', 'humanize', '', c.iopsDropRatio),
        },
      }),
      // Large-block (>= 100,000 bytes), uncapped profiles deeper than 1.
      alert('DiskprobeThroughputDrop', {
        expr: drop('probe_throughput_bytes_per_second', c.throughputDropRatio, ['block_size=~"[0-9]{6,}"', 'iodepth!="1"', 'rate_iops="0"']),
        'for': '15m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk throughput dropped on {{ $labels.instance }} {{ $labels.target }}',
          description: dropDescription('throughput', 'probe_throughput_bytes_per_second', 'humanize1024', 'B/s', c.throughputDropRatio),
        },
      }),
      // Durability profiles (fsync or fdatasync after each write, e.g. etcd-wal): the exact p99
      // of the syncs above 10 ms, etcd's hardware guidance for fdatasync, in each of the last 3
      // runs (the agent exports the least of them): one slow run does not page, at any probe
      // interval. An absolute limit, not a regression from a baseline: a disk that was always
      // this slow is unfit for a write-ahead log too.
      alert('DiskprobeSyncLatencyHigh', {
        expr: 'max without (%s, device, stat) (%s) > %s' % [
          std.join(', ', c.volatileLabels),
          s.sel('diskprobe_probe_recent_sync_latency_seconds', ['stat="p99"']),
          c.syncLatencyP99Seconds,
        ],
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Slow syncs on {{ $labels.instance }} {{ $labels.target }}',
          description: 'The p99 sync latency of profile {{ $labels.profile }} has been above %g ms in each of its last 3 runs (at least {{ $value | humanizeDuration }}); etcd and other write-ahead logs wait for it on every commit.' % (c.syncLatencyP99Seconds * 1000),
        },
      }),
    ],
  }]
