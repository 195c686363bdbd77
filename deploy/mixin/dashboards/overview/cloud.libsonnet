// The overview's cloud panels: the EBS volumes and instance-store devices that spent the most
// time over their limits, as their own statistics count it ([cloud_stats];
// rules/cloud.libsonnet). Recording rules only, instant queries.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local sel(metric, extra=[]) = s.panel(metric, ['instance=~"$instance"'] + extra);
  [
    g.panel(
      33, 'table', 'Volumes most over their limits (cloud, now)',
      "The 20 volumes (EBS; instance-store devices) that spent the largest share of the last 5 minutes over a limit, by scope: the volume's own provisioned IOPS or throughput (volume) or its instance's (instance), as their statistics (log page 0xD0) count it; DiskprobeThrottled fires at %g%% for %s. One recorded sample per volume and scope." % [c.cloudThrottledShare * 100, c.headroomThrottledFor],
      12, 9,
      [g.query('A', 'topk(20, %s)' % g.withTarget(c, sel('diskprobe:cloud_throttled:ratio_rate5m'), ['serial']), instant=true, format='table')],
    ) + g.unit('percentunit') + g.organize(['Time', '__name__'], 'over') + g.targetLink(c, ['instance', 'target', 'device'], on='target'),
    g.panel(
      34, 'stat', 'Volumes throttled (cloud)',
      'Volumes whose statistics say they spent %g%% or more of the last 5 minutes over a limit, theirs or their instance\'s.' % (c.cloudThrottledShare * 100),
      6, 4,
      [g.query('A', 'count(max without (scope) (%s) >= %g) or vector(0)' % [sel('diskprobe:cloud_throttled:ratio_rate5m'), c.cloudThrottledShare], instant=true)],
    ) + { options: { reduceOptions: { calcs: ['lastNotNull'] }, graphMode: 'none' } }
    + g.unit('none') + g.threshold(1, 'red') + { options+: { colorMode: 'background' } },
  ]
