// The target dashboard's durability row: profiles that sync (fsync or fdatasync), such as etcd-wal.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local sel(metric, extra=[]) = s.panel(metric, ['instance=~"$instance"', 'target=~"$target"', 'profile=~"$profile"'] + extra);
  // Native histogram where Prometheus keeps it, else the classic buckets.
  local histogramQuantile(metric) =
    'histogram_quantile(0.99, sum by (%s) (rate(%s[$__rate_interval]))) or histogram_quantile(0.99, sum by (%s) (rate(%s[$__rate_interval])))' % [
      s.by(['profile']), sel(metric), s.by(['profile', 'le']), sel(metric + '_bucket'),
    ];
  local etcdLimit = g.threshold(c.syncLatencyP99Seconds) + { fieldConfig+: { defaults+: { custom: { thresholdsStyle: { mode: 'line' } } } } };
  [
    g.row(19, 'Durability (fsync / fdatasync)'),
    g.panel(
      20, 'timeseries', 'Sync latency percentiles (last run, exact)',
      "Profiles that sync (fsync or fdatasync after every N writes, such as etcd-wal): exact percentiles of each run's syncs, recorded apart from its writes (fio's sync section); one point per run, held until the next. The red line is %g ms, the DiskprobeSyncLatencyHigh alert's limit (etcd's for the p99 of fdatasync is 10 ms)." % (c.syncLatencyP99Seconds * 1000),
      12, 8,
      [g.query('A', sel('diskprobe_probe_sync_latency_seconds', ['stat=~"p50|p99|p99.9"']), '{{profile}} sync {{stat}}')],
    ) + g.unit('s') + etcdLimit,
    g.panel(
      21, 'timeseries', 'Write and sync p99 (histogram)',
      "p99 of the writes and of the syncs of profiles that sync, from the native histograms where Prometheus has them, else from the classic buckets, over windows of at least two probe intervals. A write's latency ends when the page cache (buffered) or the device (O_DIRECT) took it; the sync's when it is durable.",
      12, 8,
      [
        g.query('A', histogramQuantile('diskprobe_sync_latency_seconds'), '{{profile}} sync p99'),
        g.query('B', '(%s) and on (%s) sum by (%s) (%s)' % [histogramQuantile('diskprobe_io_latency_seconds'), s.by(['profile']), s.by(['profile']), sel('diskprobe_syncs_total')], '{{profile}} write p99'),
      ],
    ) + g.unit('s') + etcdLimit + { interval: '$probe_window' },
    g.panel(
      22, 'timeseries', 'Syncs per second while probing',
      'Syncs completed divided by the time spent probing, over windows of at least two probe intervals: with a sync after every write, the rate at which a write-ahead log on this disk could commit one record at a time.',
      12, 8,
      [g.query('A', 'sum by (%s) (increase(%s[$__rate_interval])) / sum by (%s) (increase(%s[$__rate_interval]))' % [s.by(['profile']), sel('diskprobe_syncs_total'), s.by(['profile']), sel('diskprobe_probe_busy_seconds_total')], '{{profile}}')],
    ) + g.unit('ops') + { interval: '$probe_window' },
  ]
