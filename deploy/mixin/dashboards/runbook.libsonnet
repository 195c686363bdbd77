// The runbook (docs/runbook.md, rendered from runbook/runbook.md with the mixin's values): one
// text panel per section, so that an alert's runbook_url opens its own (viewPanel), with the
// alert's labels as the variables Grafana fills into the `$label`s of its queries and silence.
local g = import '../lib/dashboards.libsonnet';
local runbook = import '../lib/runbook.libsonnet';

function(c, alerts)
  local links = (import '../lib/links.libsonnet')(c);
  local sections = runbook.render(c, alerts, links.about);
  g.dashboard(
    c,
    'runbook',
    'Runbook',
    "What to do for each alert. An alert's runbook_url opens its section with the alert's labels as the variables below, filled into its queries and its silence.",
    [
      {
        name: v,
        label: v,
        type: 'textbox',
        query: '',
        current: { text: '', value: '' },
        hide: 0,
        description: "The alert's label %s (empty: the alert has none, which matches series without it)." % v,
      }
      for v in runbook.variables
    ],
    [
      {
        id: i + 1,
        type: 'text',
        title: if sections[i].title == '' then 'Runbook' else sections[i].title,
        gridPos: { w: 24, h: 12 },
        options: { mode: 'markdown', content: sections[i].text },
      }
      for i in std.range(0, std.length(sections) - 1)
    ],
  ) + {
    // Text only: no time series to mark or to share a crosshair.
    annotations: { list: [] },
    graphTooltip: 0,
  }
