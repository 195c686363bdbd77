// The target dashboard's cohort row: the disk against the disks that should perform alike (its
// cohort, rules/fleet.libsonnet). Recording rules only; the scores DiskprobeSlowerThanPeers
// decides on are in the "why it fired" row (why.libsonnet).
local g = import '../../lib/dashboards.libsonnet';

function(c)
  local s = (import '../../lib/selectors.libsonnet')(c);
  local target = ['instance=~"$instance"', 'target=~"$target"'];
  local sel(metric, extra=[]) = s.panel(metric, target + ['profile=~"$profile"'] + extra);
  local cohortLabels = [c.cohortLabel] + c.cohortDiskLabels;
  local cohort = s.by(['job'] + cohortLabels + ['profile']);
  // The cohort series of the selected target's cohorts (one per profile).
  local ofThisCohort(expr) = '%s and on (%s) %s' % [expr, cohort, sel('diskprobe:probe_latency_p99:last_in_cohort')];
  local members = s.panel('diskprobe:probe_latency_p99:last_in_cohort', ['profile=~"$profile"']);
  local spread(q) = ofThisCohort('quantile by (%s) (%g, %s)' % [cohort, q, members]);
  local line(value, color='red') = g.threshold(value, color) + { fieldConfig+: { defaults+: { custom: { thresholdsStyle: { mode: 'line' } } } } };
  local read(record) = 'last_over_time(%s[1h])' % sel(record);
  local cohortName = '{{%s}}{{%s}}' % [c.cohortLabel, c.cohortDiskLabels[0]];
  [
    g.row(50, 'Cohort (the disks that should perform alike)'),
    g.panel(
      51, 'timeseries', 'p99 against its cohort',
      "This disk's p99 every 5 minutes (the last run's), beside its cohort's median and spread (the 10th and 90th percentiles of the members' p99s) at the same moments. A cohort is the disks of one model and rotational, or the `%s` the operator named, and one profile; it is a reference from %d members at like load. A cohort that slows down together is not one disk's fault." % [c.cohortLabel, c.cohortMinSize],
      12, 8,
      [
        g.query('A', sel('diskprobe:probe_latency_p99:last'), '{{profile}} this disk'),
        g.query('B', ofThisCohort(s.panel('diskprobe_cohort:probe_latency_p99:median', ['profile=~"$profile"'])), '{{profile}} cohort %s median' % cohortName),
        g.query('C', spread(0.1), '{{profile}} cohort p10'),
        g.query('D', spread(0.9), '{{profile}} cohort p90'),
      ],
    ) + g.unit('s') + { interval: '5m' },
    g.panel(
      52, 'timeseries', 'Ratio to its peers',
      "This disk's p99 divided by its cohort's median at each moment, and over the last %s: the median of those ratios and their 80th percentile (DiskprobeSlowerThanPeers fires at %g, for the 80th percentile when it is also %gx the median, and when the disk is an outlier in its cohort)." % [c.peerWindow, c.peerRatio, c.peerIntermittentSpread],
      12, 8,
      [
        g.query('A', sel('diskprobe:probe_latency_p99:peer_ratio'), '{{profile}} each sample'),
        g.query('B', read('diskprobe:probe_latency_p99:peer_ratio_median_12h'), '{{profile}} median, %s' % c.peerWindow),
        g.query('C', read('diskprobe:probe_latency_p99:peer_ratio_p80_12h'), '{{profile}} p80, %s' % c.peerWindow),
      ],
    ) + g.unit('short') + line(c.peerRatio) + { interval: '5m' },
    g.panel(
      54, 'timeseries', 'Workload against its peers',
      "Reads and writes per second of the disk under the target (diskstats) divided by its cohort's median: a disk %gx busier than its peers in a fifth of its samples over %s leaves the cohort's reference and is not paged as slower than its peers." % [c.peerBusyRatio, c.peerWindow],
      12, 8,
      [
        g.query('A', s.panel('diskprobe:target_disk_ios:peer_ratio', target), 'each sample'),
        g.query('B', 'last_over_time(%s[1h])' % s.panel('diskprobe:target_disk_ios:peer_ratio_p80_12h', target), 'p80, %s' % c.peerWindow),
      ],
    ) + g.unit('short') + line(c.peerBusyRatio, 'orange') + { interval: '5m' },
  ]
