// One target: what its alerts decide on, its probes, its cohort, the durability row, its device's
// diskstats, its headroom and what the cloud says. Each row is a file of
// dashboards/target/; a new row is a new file added to the list below.
local g = import '../lib/dashboards.libsonnet';

local rows = [
  import 'target/why.libsonnet',
  import 'target/probes.libsonnet',
  import 'target/cohort.libsonnet',
  import 'target/durability.libsonnet',
  import 'target/device.libsonnet',
  import 'target/headroom.libsonnet',
  import 'target/cloud.libsonnet',
];

function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  g.dashboard(
    c,
    'target',
    'Target detail',
    "One target: the numbers each alert decides on (why it fired), latency heatmap per profile, exact per-run percentiles against the alert's baseline, its p99 against its cohort's, IOPS and throughput per profile, sync latency of durability profiles, diskstats of its device, and what the cloud says about it (EBS, instance store).",
    [
      g.datasourceVariable(c),
      g.clusterVariable(c),
      g.labelVariable('instance', 'Instance', s.panel('diskprobe_build_info')),
      g.labelVariable('target', 'Target', s.panel('diskprobe_target_info', ['instance=~"$instance"'])),
      g.labelVariable('profile', 'Profile', s.panel('diskprobe_profile_info', ['instance=~"$instance"', 'target=~"$target"']), multi=true),
      g.labelVariable('device', 'Device', s.panel('diskprobe_target_info', ['instance=~"$instance"', 'target=~"$target"'])),
      {
        name: 'probe_window',
        label: 'Window (>= 2 probe intervals)',
        type: 'custom',
        query: '10m,20m,30m,1h,2h',
        current: { text: '10m', value: '10m' },
        options: [
          { text: w, value: w, selected: w == '10m' }
          for w in ['10m', '20m', '30m', '1h', '2h']
        ],
        multi: false,
        includeAll: false,
        hide: 0,
        description: 'Panels built on counters and histograms use windows of at least this length, so that every window holds a run: at least twice the longest probe interval (5m by default).',
      },
    ],
    std.flattenArrays([row(c) for row in rows]),
  )
