// The overview's fleet-peers panels: the disks slowest relative to their cohorts, and cohorts
// slower together (rules/fleet.libsonnet). Recording rules only, one sample per pair.
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local sel(metric) = s.panel(metric, ['instance=~"$instance"']);
  local read(record) = 'last_over_time(%s[1h])' % sel(record);
  local pairLegend = '{{%s}} {{instance}} {{target}} {{profile}}' % c.clusterLabel;
  local pair = s.by(['job', 'instance', 'target', 'profile']);
  [
    g.panel(
      40, 'table', 'Slowest disks against their peers (last %s)' % c.peerWindow,
      "The 20 target × profile pairs whose p99 was highest relative to their cohort's median at the same moments, over the last %s: the median of those ratios (DiskprobeSlowerThanPeers fires at %g, if the disk is also an outlier in its cohort). Open a disk in the target dashboard's cohort row." % [c.peerWindow, c.peerRatio],
      12, 9,
      [g.query('A', 'topk(20, %s)' % read('diskprobe:probe_latency_p99:peer_ratio_median_12h'), instant=true, format='table')],
    ) + g.unit('short') + g.organize(['Time'], 'x peers') + g.targetLink(c, ['instance', 'target', 'profile']),
    g.panel(
      41, 'timeseries', 'Top 10: p99 against peers',
      "The median ratio of their p99 to their cohort's median over %s, of the 10 pairs where it was highest at any point of the time range (ranked once, over the range)." % c.peerWindow,
      12, 9,
      [g.query('A', g.rankOnce('topk', 10, 'max', read('diskprobe:probe_latency_p99:peer_ratio_median_12h'), pair), pairLegend)],
    ) + g.unit('short') + { interval: '30m' },
    g.panel(
      42, 'timeseries', 'Cohorts against their best day',
      "The median p99 over 6 hours relative to their best daily median of the last 7 days, of the 10 cohorts (of the selected clusters, whatever the instance) where it was highest at any point of the time range (ranked once, over the range; DiskprobeCohortSlowdown, info, at %g): a cohort that slows down together, which pages no disk." % c.cohortSlowdownRatio,
      24, 8,
      // Cohort-level series have no instance: every cohort of the selected clusters.
      [g.query('A', g.rankOnce('topk', 10, 'max', 'last_over_time(%s[1h]) / last_over_time(%s[2h])' % [
        s.panel('diskprobe_cohort:probe_latency_p99:median_6h'),
        s.panel('diskprobe_cohort:probe_latency_p99:baseline_7d'),
      ], s.by(['job', c.cohortLabel] + c.cohortDiskLabels + ['profile'])), '{{%s}} {{%s}}{{%s}} {{profile}}' % [c.clusterLabel, c.cohortLabel, c.cohortDiskLabels[0]])],
    ) + g.unit('short') + { interval: '30m' },
  ]
