// The target dashboard's headroom row: how close the disks under the target are to the limits
// they are sold with, the limits and where they come from, and the gentle probe's p99 against
// the level that means throttling (rules/headroom.libsonnet).
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local here = ['instance=~"$instance"'];
  // The whole disks under the selected target.
  local disks = 'and on (%s) %s' % [
    s.by(['job', 'instance', 'device']),
    s.panel('diskprobe_target_disk_info', here + ['target=~"$target"']),
  ];
  local limit(metric, recorded) = |||
    max without (pod, container, endpoint) (%s) %s
      or ignoring (source) last_over_time(%s[2h]) %s
  ||| % [s.panel(metric, here), disks, s.panel(recorded, here), disks];
  [
    g.row(40, 'Headroom'),
    g.panel(
      41, 'timeseries', 'Share of the disk limits in use',
      "The workload's share of each limit of the disks under the target (their diskstats without the probes' own I/O, over 2 minutes), and of the node's ceiling: DiskprobeNearLimit fires at %g%% for %s. Clouds count a large I/O as several (EBS and Azure in 256 KiB units); diskstats counts one." % [c.headroomNearLimitShare * 100, c.headroomNearLimitFor],
      12, 8,
      [
        g.query('A', '%s %s' % [s.panel('diskprobe:disk_limit_consumed:ratio_rate4m', here), disks], '{{device}} {{limit}} ({{source}})'),
        g.query('B', s.panel('diskprobe:node_limit_consumed:ratio_rate4m', here), 'node {{limit}} ({{source}})'),
      ],
    ) + g.unit('percentunit') + g.threshold(c.headroomNearLimitShare),
    g.panel(
      42, 'timeseries', 'Gentle probe p99 against its throttled level',
      "The p99 of the target's gentle (rate-capped) probes, their calm level (median over a day at under half load) and the level above which, at %g%% of a limit, the disk counts as throttled." % (c.headroomNearLimitShare * 100),
      12, 8,
      [
        g.query('A', 'max without (stat) (%s) and on (%s) %s' % [
          s.panel('diskprobe_probe_latency_seconds', here + ['target=~"$target"', 'stat="p99"']),
          s.by(['job', 'instance', 'target', 'profile']),
          s.panel('diskprobe_profile_info', here + ['target=~"$target"', 'rate_iops!="0"']),
        ], '{{profile}} p99'),
        g.query('B', 'last_over_time(%s[2h])' % s.panel('diskprobe:probe_latency_p99:calm_median_1d', here + ['target=~"$target"']), '{{profile}} calm'),
        g.query('C', 'last_over_time(%s[2h])' % s.panel('diskprobe:probe_latency_p99:throttled_above', here + ['target=~"$target"']), '{{profile}} throttled above'),
      ],
    ) + g.unit('s'),
    g.panel(
      43, 'table', 'Limits of the disks',
      'What each disk under the target is sold with, in I/Os per second and bytes per second: declared in the configuration (source config) or measured by its capacity probes (source probe, the median of a day of completed runs); the declared one counts where both exist.',
      12, 6,
      [
        g.query('A', limit('diskprobe_disk_limit_iops', 'diskprobe:disk_limit_iops:probe'), instant=true, format='table'),
        g.query('B', limit('diskprobe_disk_limit_bytes_per_second', 'diskprobe:disk_limit_bytes_per_second:probe'), instant=true, format='table'),
      ],
    ) + g.mergedTable({ A: ['IOPS', 'iops'], B: ['throughput', 'Bps'] }, ['Time', '__name__', 'job', 'cluster'])
    + g.targetLink(c, ['instance', 'device'], carry=['target']),
    g.panel(
      44, 'stat', 'Throttled',
      "1 when a disk under the target is at %g%% or more of a limit and its gentle probe's p99 is above its throttled level (diskprobe:disk_throttled:bool); DiskprobeThrottled fires after %s." % [c.headroomNearLimitShare * 100, c.headroomThrottledFor],
      12, 6,
      [g.query('A', '%s %s' % [s.panel('diskprobe:disk_throttled:bool', here), disks], '{{device}}', instant=true)],
    ) + g.unit('bool_yes_no') + g.threshold(1),
  ]
