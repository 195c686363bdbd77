// The overview's headroom panels: the disks closest to the limits they are sold with, and how
// many are throttled now (rules/headroom.libsonnet). Recording rules only, instant queries.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local sel(metric, extra=[]) = s.panel(metric, ['instance=~"$instance"'] + extra);
  [
    g.panel(
      30, 'table', 'Disks closest to their limits (now)',
      "The 20 disks whose workload (diskstats without the probes' own I/O, over 2 minutes) uses the largest share of a limit they are sold with, declared (source config) or measured (source probe); DiskprobeNearLimit fires at %g%% of a declared limit for %s. One recorded sample per disk and limit, with a target on the disk." % [c.headroomNearLimitShare * 100, c.headroomNearLimitFor],
      12, 9,
      [g.query('A', 'topk(20, %s)' % g.withTarget(c, sel('diskprobe:disk_limit_consumed:ratio_rate4m'), ['device']), instant=true, format='table')],
    ) + g.unit('percentunit') + g.organize(['Time', '__name__'], 'used') + g.targetLink(c, ['instance', 'target', 'device'], on='target'),
    g.panel(
      31, 'stat', 'Throttled disks',
      "Disks at %g%% or more of a limit whose gentle probe's p99 is above its throttled level (diskprobe:disk_throttled:bool)." % (c.headroomNearLimitShare * 100),
      6, 4,
      [g.query('A', 'count(%s == 1) or vector(0)' % sel('diskprobe:disk_throttled:bool'), instant=true)],
    ) + { options: { reduceOptions: { calcs: ['lastNotNull'] }, graphMode: 'none' } }
    + g.unit('none') + g.threshold(1, 'red') + { options+: { colorMode: 'background' } },
    g.panel(
      32, 'stat', 'Disks near a limit',
      'Disks (and node ceilings) at %g%% or more of a limit now.' % (c.headroomNearLimitShare * 100),
      6, 4,
      [g.query('A', 'count(%s >= %g or %s >= %g) or vector(0)' % [
        sel('diskprobe:disk_limit_consumed:ratio_rate4m'),
        c.headroomNearLimitShare,
        sel('diskprobe:node_limit_consumed:ratio_rate4m'),
        c.headroomNearLimitShare,
      ], instant=true)],
    ) + { options: { reduceOptions: { calcs: ['lastNotNull'] }, graphMode: 'none' } }
    + g.unit('none') + g.threshold(1, 'orange') + { options+: { colorMode: 'background' } },
  ]
