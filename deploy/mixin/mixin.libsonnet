// diskprobe_exporter's monitoring mixin: recording rules, alerts and Grafana dashboards, from one
// configuration (config.libsonnet). Use it as every mixin is used:
//   local diskprobe = (import 'deploy/mixin/mixin.libsonnet') + { _config+:: { jobSelector: 'job="disks"' } };
//   diskprobe.prometheusRules, diskprobe.prometheusAlerts, diskprobe.grafanaDashboards
//
// Each concern is a file of its own, listed once below: a file of rules/ or alerts/ is a function
// of the configuration returning rule groups (groups of the same name from several files become
// one group, their rules in list order); a file of dashboards/ returns one dashboard.
local recordingRules = [
  import 'rules/fleet.libsonnet',
  import 'rules/current.libsonnet',
  import 'rules/baseline.libsonnet',
  import 'rules/headroom.libsonnet',
  import 'rules/cloud.libsonnet',
];
local alerts = [
  import 'alerts/probes.libsonnet',
  import 'alerts/health.libsonnet',
  import 'alerts/fleet.libsonnet',
  import 'alerts/headroom.libsonnet',
];
local dashboards = {
  'diskprobe-overview.json': import 'dashboards/overview.libsonnet',
  'diskprobe-target.json': import 'dashboards/target.libsonnet',
};

// The groups of `files` evaluated with config `c`, same-named groups merged in order.
local groups(files, c) =
  local all = std.flattenArrays([f(c) for f in files]);
  local names = std.foldl(function(seen, g) if std.member(seen, g.name) then seen else seen + [g.name], all, []);
  [
    local same = [g for g in all if g.name == name];
    same[0] { rules: std.flattenArrays([g.rules for g in same]) }
    for name in names
  ];

(import 'config.libsonnet') + {
  prometheusRules+:: { groups+: groups(recordingRules, $._config) },
  prometheusAlerts+:: { groups+: groups(alerts, $._config) },
  grafanaDashboards+:: { [name]: dashboards[name]($._config) for name in std.objectFields(dashboards) },
}
