// diskprobe_exporter's monitoring mixin: recording rules, alerts and Grafana dashboards, from one
// configuration (config.libsonnet). Use it as every mixin is used:
//   local diskprobe = (import 'deploy/mixin/mixin.libsonnet') + { _config+:: { jobSelector: 'job="disks"' } };
//   diskprobe.prometheusRules, diskprobe.prometheusAlerts, diskprobe.grafanaDashboards
//
// The runbook (runbook/runbook.md) is rendered with the configuration's values and the alerts'
// `for` and `keep_firing_for`: `runbook` (docs/runbook.md) and the runbook dashboard.
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
  grafanaDashboards+:: { [name]: dashboards[name]($._config) for name in std.objectFields(dashboards) } + {
    'diskprobe-runbook.json': (import 'dashboards/runbook.libsonnet')($._config, $.alertRules),
  },
  // The runbook (lib/runbook.libsonnet): docs/runbook.md, with this configuration's values.
  runbook:: std.join('\n', [
    s.text
    for s in (import 'lib/runbook.libsonnet').render($._config, $.alertRules, (import 'lib/links.libsonnet')($._config).about)
  ]),
  alertRules:: std.flattenArrays([g.rules for g in $.prometheusAlerts.groups]),
  // What each recording answers (rules/questions.libsonnet), and the list of docs/rules-design.md:
  //   jsonnet -S -e "(import 'deploy/mixin/mixin.libsonnet').recordingQuestionsTable"
  recordingQuestions:: import 'rules/questions.libsonnet',
  recordingQuestionsTable::
    local records = std.set([r.record for g in $.prometheusRules.groups for r in g.rules]);
    local missing = [r for r in records if !std.objectHas($.recordingQuestions, r)];
    local extra = [q for q in std.objectFields($.recordingQuestions) if !std.member(records, q)];
    assert missing == [] && extra == [] : 'rules/questions.libsonnet: no line for %s; no rule for %s' % [missing, extra];
    std.join('\n', ['| recording | answers |', '|---|---|'] + [
      '| `%s` | %s |' % [r, $.recordingQuestions[r]]
      for r in records
    ]) + '\n',
}
