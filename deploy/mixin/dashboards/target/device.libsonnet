// The target dashboard's device row: diskstats of the device under the target (all workloads).
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local rate(metric) = 'rate(%s[$__rate_interval])' % s.panel(metric, ['instance=~"$instance"', 'device=~"$device"']);
  [
    g.row(13, 'Device (diskstats)'),
    g.panel(
      14, 'timeseries', 'Device IOPS',
      'Reads and writes completed per second by the whole device (all workloads, not only probes).',
      12, 8,
      [
        g.query('A', rate('diskprobe_disk_reads_completed_total'), 'reads'),
        g.query('B', rate('diskprobe_disk_writes_completed_total'), 'writes'),
      ],
    ) + g.unit('iops'),
    g.panel(
      15, 'timeseries', 'Device throughput',
      'Bytes read and written per second by the whole device.',
      12, 8,
      [
        g.query('A', rate('diskprobe_disk_read_bytes_total'), 'read'),
        g.query('B', rate('diskprobe_disk_written_bytes_total'), 'written'),
      ],
    ) + g.unit('Bps'),
    g.panel(
      16, 'timeseries', 'Device queue size',
      'Average number of I/Os in flight (aqu-sz): DiskprobeDiskSaturated fires above %g for 30 minutes.' % c.diskSaturationQueue,
      12, 8,
      [g.query('A', rate('diskprobe_disk_io_time_weighted_seconds_total'), '{{device}}')],
    ) + g.unit('short'),
    g.panel(
      17, 'timeseries', 'Device await',
      'Average time per completed read and write.',
      12, 8,
      [
        g.query('A', '%s / %s' % [rate('diskprobe_disk_read_time_seconds_total'), rate('diskprobe_disk_reads_completed_total')], 'read'),
        g.query('B', '%s / %s' % [rate('diskprobe_disk_write_time_seconds_total'), rate('diskprobe_disk_writes_completed_total')], 'write'),
      ],
    ) + g.unit('s'),
    g.panel(
      18, 'timeseries', 'Device utilisation',
      'Share of time the device had I/O in flight; on SSD and NVMe 100% does not mean saturated (see the queue size).',
      12, 8,
      [g.query('A', rate('diskprobe_disk_io_time_seconds_total'), '{{device}}')],
    ) + g.unit('percentunit'),
  ]
