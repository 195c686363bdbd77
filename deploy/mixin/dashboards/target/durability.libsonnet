// The target dashboard's durability row: profiles that sync (fsync or fdatasync), such as etcd-wal.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local sel = 'job=~"$job",instance=~"$instance",target=~"$target",profile=~"$profile"';
  local histogramQuantile(metric) =
    'histogram_quantile(0.99, sum by (profile) (rate(%s{%s}[$__rate_interval]))) or histogram_quantile(0.99, sum by (profile, le) (rate(%s_bucket{%s}[$__rate_interval])))' % [metric, sel, metric, sel];
  local etcdLimit = g.threshold(0.01) + { fieldConfig+: { defaults+: { custom: { thresholdsStyle: { mode: 'line' } } } } };
  [
    g.row(19, 'Durability (fsync / fdatasync)'),
    g.panel(
      20, 'timeseries', 'Sync latency percentiles (last run, exact)',
      "Profiles that sync (fsync or fdatasync after every N writes, such as etcd-wal): exact percentiles of each run's syncs, recorded apart from its writes (fio's sync section); one point per run, held until the next. The red line is 10 ms, etcd's limit for the p99 of fdatasync (the DiskprobeSyncLatencyHigh alert).",
      12, 8,
      [g.query('A', 'diskprobe_probe_sync_latency_seconds{%s,stat=~"p50|p99|p99.9"}' % sel, '{{profile}} sync {{stat}}')],
    ) + g.unit('s') + etcdLimit,
    g.panel(
      21, 'timeseries', 'Write and sync p99 (histogram)',
      "p99 of the writes and of the syncs of profiles that sync, from the native histograms where Prometheus has them, else from the classic buckets, over windows of at least two probe intervals. A write's latency ends when the page cache (buffered) or the device (O_DIRECT) took it; the sync's when it is durable.",
      12, 8,
      [
        g.query('A', histogramQuantile('diskprobe_sync_latency_seconds'), '{{profile}} sync p99'),
        g.query('B', '(%s) and on (profile) sum by (profile) (diskprobe_syncs_total{%s})' % [histogramQuantile('diskprobe_io_latency_seconds'), sel], '{{profile}} write p99'),
      ],
    ) + g.unit('s') + etcdLimit + { interval: '$probe_window' },
    g.panel(
      22, 'timeseries', 'Syncs per second while probing',
      'Syncs completed divided by the time spent probing, over windows of at least two probe intervals: with a sync after every write, the rate at which a write-ahead log on this disk could commit one record at a time.',
      12, 8,
      [g.query('A', 'sum by (profile) (increase(diskprobe_syncs_total{%s}[$__rate_interval])) / sum by (profile) (increase(diskprobe_probe_busy_seconds_total{%s}[$__rate_interval]))' % [sel, sel], '{{profile}}')],
    ) + g.unit('ops') + { interval: '$probe_window' },
  ]
