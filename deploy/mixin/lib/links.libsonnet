// The links of each alert: its dashboard_url (the dashboard that shows what it is about, with its
// labels as the dashboard's variables) and its runbook_url (its section of the runbook dashboard,
// with its labels as the variables its queries name). Use:
//   local links = (import 'lib/links.libsonnet')(c);  links.annotations('DiskprobeIOErrors')
function(c)
  local runbook = import 'runbook.libsonnet';
  // The dashboards an alert links to, by uid suffix: their variables that come from a label
  // (in the order of the dashboard), and what the link sets besides.
  local dashboards = {
    target: { vars: ['cluster', 'instance', 'target', 'profile', 'device'] },
    overview: { vars: ['cluster', 'instance'] },
  };
  // What each alert is about: `dashboard` (target: its target's dashboard; overview: the node's
  // view of the fleet overview, or with `panel` the cohorts' panel), `from` (the time range it
  // opens with, enough to show the onset), and `silence` (the labels a silence matches, and how
  // long the repair it covers takes before keep_firing_for is added: docs/runbook.md).
  local pair = ['instance', 'target', 'profile'];
  local about = {
    DiskprobeIOErrors: { dashboard: 'target', from: '6h', silence: pair, repair: '2h' },
    DiskprobeTargetVanished: { dashboard: 'target', from: '6h', silence: ['instance', 'target'], repair: '2h' },
    DiskprobeIOHung: { dashboard: 'target', from: '6h', silence: ['instance', 'device'], repair: '2h' },
    DiskprobeDiskLost: { dashboard: 'overview', from: '6h', silence: ['instance', 'target'], repair: '2h' },
    DiskprobeExporterDown: { dashboard: 'overview', from: '6h', silence: ['instance'], repair: '2h' },
    DiskprobeProbeFailing: { dashboard: 'target', from: '6h', silence: pair, repair: '4h' },
    DiskprobeFarSlowerThanPeers: { dashboard: 'target', from: '24h', silence: pair, repair: '4h' },
    DiskprobeSlowerThanPeers: { dashboard: 'target', from: '24h', silence: pair, repair: '1d' },
    DiskprobeLatencyRegression: { dashboard: 'target', from: '24h', silence: pair, repair: '1d' },
    DiskprobeSyncLatencyHigh: { dashboard: 'target', from: '6h', silence: pair, repair: '1d' },
    DiskprobeIOPSDrop: { dashboard: 'target', from: '24h', silence: pair, repair: '1d' },
    DiskprobeThroughputDrop: { dashboard: 'target', from: '24h', silence: pair, repair: '1d' },
    DiskprobeThrottled: { dashboard: 'overview', from: '6h', silence: ['instance', 'device'], repair: '4h' },
    DiskprobeNearLimit: { dashboard: 'overview', from: '6h', silence: ['instance', 'device', 'limit'], repair: '1d' },
    DiskprobeProbeStale: { dashboard: 'target', from: '6h', silence: pair, repair: '4h' },
    DiskprobeProbeAbsent: { dashboard: 'target', from: '6h', silence: ['instance', 'target'], repair: '1d' },
    DiskprobeDiskSaturated: { dashboard: 'overview', from: '6h', silence: ['instance', 'device'], repair: '1d' },
    DiskprobeCohortSlowdown: { dashboard: 'overview', panel: 42, from: '2d', silence: ['cohort', 'model', 'rotational', 'profile'], repair: '1d' },
  };
  // `&var-NAME=value` for each variable whose label the alert has (the cluster variable from
  // `clusterLabel`), in `vars`' order.
  local vars(names) = std.join('', [
    '{{ with $labels.%s }}&var-%s={{ . | urlquery }}{{ end }}' % [if v == 'cluster' then c.clusterLabel else v, v]
    for v in names
  ]);
  local url(uid, first, names) = '%s/d/%s%s?%s' % [c.grafanaURL, c.dashboardUIDPrefix, uid, first] + vars(names);
  {
    about:: about,

    // The annotations: dashboard_url and runbook_url.
    annotations(alert)::
      assert std.objectHas(about, alert) : '%s: not in lib/links.libsonnet' % alert;
      local a = about[alert];
      {
        dashboard_url: url(a.dashboard, if std.objectHas(a, 'panel') then 'viewPanel=%d&from=now-%s&to=now' % [a.panel, a.from] else 'from=now-%s&to=now' % a.from, dashboards[a.dashboard].vars),
        // The variables its section names, and those of its silence line.
        runbook_url:
          if c.runbookURLBase != '' then '%s#%s' % [c.runbookURLBase, std.asciiLower(alert)]
          else url('runbook', 'viewPanel=%d' % runbook.panelId(alert), [
            v
            for v in runbook.variables
            if std.member(runbook.variablesOf(alert), v) || std.member(a.silence, v)
          ]),
      },
  }
