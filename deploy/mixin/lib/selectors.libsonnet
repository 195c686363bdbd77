// Selectors and groupings built from the configuration, so that every rule and panel query
// selects with the job and cluster selectors and every aggregation and join keeps the cluster
// label. Use: local s = (import 'lib/selectors.libsonnet')(c);
//   s.sel('diskprobe_probe_iops', ['profile=~"$profile"'])  diskprobe_probe_iops{job="diskprobe", profile=~"$profile"}
//   s.by(['job', 'instance'])                              cluster, job, instance
function(c) {
  local matchers(extra) = std.join(', ', [m for m in [c.jobSelector, c.clusterSelector] + extra if m != '']),

  // `metric` selected by the job and cluster selectors and the `extra` matchers.
  sel(metric, extra=[]):: '%s{%s}' % [metric, matchers(extra)],

  // `metric` of another job (kube-state-metrics): `jobSelector` replaced by `job`.
  selJob(job, metric, extra=[]):: '%s{%s}' % [metric, std.join(', ', [m for m in [job, c.clusterSelector] + extra if m != ''])],

  // For dashboards: `sel` that also matches the `cluster` variable ("All" is .*, which matches
  // series without the label, as a single cluster's Prometheus has them).
  panel(metric, extra=[]):: self.sel(metric, ['%s=~"$cluster"' % c.clusterLabel] + extra),

  // A grouping (for by and on): the cluster label, then `labels`.
  by(labels):: std.join(', ', [c.clusterLabel] + labels),

  // The "one" side of a join, unique per match group by construction (docs/rules-design.md,
  // "Joins"): at most one series of `expr` per value of `labels` (a grouping from `by`), with all
  // of its labels, so that a join `on (labels) group_left (...)` copies them and never finds two.
  one(labels, expr):: 'topk by (%s) (1, %s)' % [labels, expr],

  // For alert annotations: a Go template action setting `$var` to PromQL matchers of the alert's
  // cluster label and `labels` (its own values), for the queries an annotation makes. A label
  // the alert does not have matches series without it.
  matchers(var, labels):: '{{ $%s := printf "%s" %s -}}' % [
    var,
    std.join(',', ['%s=%%q' % l for l in [c.clusterLabel] + labels]),
    std.join(' ', ['$labels.%s' % l for l in [c.clusterLabel] + labels]),
  ],

  // An alert's links (lib/links.libsonnet): its dashboard_url and runbook_url annotations.
  runbook(alert):: (import 'links.libsonnet')(c).annotations(alert),
}
