// The files rendered from the mixin, by their path in the repository, as values:
// deploy/mixin/render writes them (YAML or JSON by extension, Markdown as the string; jsonnet 0.18's own
// std.manifestYamlDoc and std.manifestJsonEx take seconds), tests/deploy/mixin.rs renders them again
// and compares them parsed. `config` overrides _config:
//   jsonnet --tla-code 'config={jobSelector: "job=\"disks\""}' deploy/mixin/render.jsonnet
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  local rules = { groups: mixin.prometheusRules.groups + mixin.prometheusAlerts.groups };
  {
    'deploy/prometheus/rules.yml': rules,
    'deploy/kubernetes/prometheusrule.yaml': {
      apiVersion: 'monitoring.coreos.com/v1',
      kind: 'PrometheusRule',
      metadata: { name: 'diskprobe-exporter' },
      spec: rules,
    },
    'docs/runbook.md': mixin.runbook,
  } + {
    ['grafana/' + name]: mixin.grafanaDashboards[name]
    for name in std.objectFields(mixin.grafanaDashboards)
  }
