// The target dashboard's cloud row: what EC2 says about the disks under the target (EBS volumes
// and instance-store devices, [cloud_stats]; rules/cloud.libsonnet) beside what the probes
// measure. The cloud's series meet the target's by serial (diskprobe_target_disk_info), never by
// device; disks without such statistics leave the row empty.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local here = ['instance=~"$instance"'];
  // The whole disks under the selected target, by serial.
  local disks = 'and on (%s) %s' % [
    s.by(['job', 'instance', 'serial']),
    s.panel('diskprobe_target_disk_info', here + ['target=~"$target"']),
  ];
  [
    g.row(60, 'Cloud statistics (EBS, instance store)'),
    g.panel(
      61, 'timeseries', "Cloud latency against the probes'",
      "The p50 and p99 of the disk's reads and writes as the cloud measures them (log page 0xD0's histograms over 5 minutes), beside the p99 of the target's probe runs: the cloud's time is the volume's own, the probe's includes the guest's queue.",
      12, 8,
      [
        g.query('A', '%s %s' % [s.panel('diskprobe:cloud_io_latency_seconds:p50_rate5m', here), disks], '{{device}} {{op}} p50 (cloud)'),
        g.query('B', '%s %s' % [s.panel('diskprobe:cloud_io_latency_seconds:p99_rate5m', here), disks], '{{device}} {{op}} p99 (cloud)'),
        g.query('C', 'max without (stat) (%s)' % s.panel('diskprobe_probe_latency_seconds', here + ['target=~"$target"', 'profile=~"$profile"', 'stat="p99"']), '{{profile}} p99 (probe)'),
      ],
    ) + g.unit('s'),
    g.panel(
      62, 'timeseries', 'Share of the time over a limit (cloud)',
      "The share of the last 5 minutes the volume spent over its provisioned IOPS or throughput (scope volume) and over its instance's EBS or instance-store limits (scope instance), as the volume's statistics count it; DiskprobeThrottled fires at %g%% for %s." % [c.cloudThrottledShare * 100, c.headroomThrottledFor],
      12, 8,
      [g.query('A', '%s %s' % [s.panel('diskprobe:cloud_limit_exceeded:ratio_rate5m', here), disks], '{{device}} {{scope}} {{limit}}')],
    ) + g.unit('percentunit') + g.threshold(c.cloudThrottledShare),
    g.panel(
      63, 'table', 'Cloud statistics read',
      'Per disk under the target: 1 when its log page 0xD0 was read at the last scrape, 0 when not (diskprobe_cloud_stats_failure_info gives the reason: no_cap_sys_admin, einval, ...).',
      24, 5,
      [
        g.query('A', '%s %s' % [s.panel('diskprobe_cloud_stats_success', here), disks], instant=true, format='table'),
        g.query('B', '%s %s' % [s.panel('diskprobe_cloud_stats_failure_info', here), disks], instant=true, format='table'),
      ],
    ) + g.mergedTable({ A: ['read', 'bool_yes_no'] }, ['Time', '__name__', 'job', 'cluster', 'Value #B'])
    + g.targetLink(c, ['instance'], carry=['target']),
  ]
