// Small builders for Grafana dashboards (schema 39, Grafana 11): panels, queries, variables and
// a flowing layout, so that a dashboard file says what it shows, not where.
{
  datasource:: { type: 'prometheus', uid: '${datasource}' },

  // A dashboard of `c`'s tags, refresh and uid prefix; `panels` are laid out by `layout`. Its
  // time series share one crosshair, and it marks firing alerts, agent restarts and
  // configuration reloads of the selected instances (`annotations`).
  dashboard(c, name, title, description, variables, panels):: {
    uid: c.dashboardUIDPrefix + name,
    title: c.dashboardTitlePrefix + title,
    description: description,
    tags: c.dashboardTags,
    timezone: '',
    schemaVersion: 39,
    version: 1,
    editable: true,
    refresh: c.dashboardRefresh,
    time: { from: 'now-6h', to: 'now' },
    templating: { list: variables },
    graphTooltip: 1,
    annotations: { list: $.annotations(c) },
    links: [{
      title: 'diskprobe',
      type: 'dashboards',
      tags: c.dashboardTags,
      asDropdown: true,
      includeVars: true,
      keepTime: true,
    }],
    panels: $.layout(panels),
  },

  // Places panels left to right in lines 24 units wide (a panel that does not fit starts the
  // next line, below the tallest of the current one). Panel ids are given by the panels
  // themselves, so that links to a panel (viewPanel=ID) survive new panels; a duplicate fails.
  layout(panels)::
    local ids = [p.id for p in panels];
    assert std.length(std.set(ids)) == std.length(ids) : 'duplicate panel ids: %s' % [ids];
    std.foldl(
      function(s, p)
        local wrap = s.x + p.gridPos.w > 24;
        local x = if wrap then 0 else s.x;
        local y = if wrap then s.y + s.lineH else s.y;
        s {
          x: x + p.gridPos.w,
          y: y,
          lineH: if wrap then p.gridPos.h else std.max(s.lineH, p.gridPos.h),
          out+: [p { gridPos+: { x: x, y: y } }],
        },
      panels,
      { x: 0, y: 0, lineH: 0, out: [] }
    ).out,

  // The marks every dashboard draws on its time series: diskprobe alerts firing, agent restarts
  // and configuration reloads, of the selected clusters and instances. Restarts and reloads are
  // placed at the time the agent's own series give (`useValueForTime`: the value in
  // milliseconds); a reload is a successful (re)load more than 10 s after the process started
  // (the first load is part of the start).
  annotations(c)::
    local s = (import 'selectors.libsonnet')(c);
    local here = ['instance=~"$instance"'];
    local agent = s.by(['job', 'instance']);
    local started = 'max by (%s) (%s)' % [agent, s.panel('process_start_time_seconds', here)];
    local mark(name, color, expr, title, text, valueTime, tags) = {
      name: name,
      datasource: $.datasource,
      enable: true,
      hide: false,
      iconColor: color,
      expr: expr,
      step: '1m',
      titleFormat: title,
      textFormat: text,
      tagKeys: std.join(',', tags),
      useValueForTime: valueTime,
    };
    [
      mark(
        'Alerts firing', 'red',
        s.panel('ALERTS', here + ['alertname=~"Diskprobe.*"', 'alertstate="firing"']),
        '{{alertname}}', '{{instance}} {{target}} {{profile}} {{device}}', false,
        ['alertname', 'severity', 'target', 'profile', 'device'],
      ),
      mark(
        'Agent restarts', 'blue',
        '%s * 1000' % started,
        'diskprobe_exporter started', '{{instance}}', true, ['instance'],
      ),
      mark(
        'Configuration reloads', 'purple',
        '(max by (%s) (%s) > on (%s) %s + 10) * 1000' % [
          agent, s.panel('diskprobe_config_last_reload_success_timestamp_seconds', here), agent, started,
        ],
        'configuration reloaded', '{{instance}}', true, ['instance'],
      ),
    ],

  // A ranking that keeps its k series over the whole time range: `expr` (a per-step value of
  // each series) drawn for the k series whose `over` (max or min) of it over the range, at the
  // range's end, is highest (topk) or lowest (bottomk). `on` names the labels of a series.
  rankOnce(ranking, k, over, expr, on)::
    '(%s) and on (%s) %s(%d, %s_over_time((%s)[$__range:$__interval] @ end()))' % [
      expr, on, ranking, k, over, expr,
    ],

  // `expr` (series of a disk, told apart by `keys`: device or serial) with the `target` label of
  // one target on that disk (diskprobe_target_disk_info, one per disk by construction), so that
  // its table row can link to the target dashboard (`targetLink` with `on='target'`); series of
  // disks under no target as they are.
  withTarget(c, expr, keys)::
    local s = (import 'selectors.libsonnet')(c);
    local on = s.by(['job', 'instance'] + keys);
    '%s * on (%s) group_left (target) %s or on (%s) %s' % [
      expr, on, s.one(on, s.panel('diskprobe_target_disk_info', ['instance=~"$instance"'])), on, expr,
    ],

  // A table's rows link to the target dashboard (`c`'s uid prefix), with the data source, the
  // cluster variable and the time range of this one, and a variable per field in `fields` (the
  // row's label of that name), then the current values of this dashboard's variables `carry`.
  // With `on`, the link is that column's only, so that a row without it (a disk under no
  // target) has nothing to follow.
  targetLink(c, fields, carry=[], on=null)::
    local link = {
      title: 'Open in the target dashboard',
      url: '/d/%starget/?${datasource:queryparam}&${cluster:queryparam}%s%s&${__url_time_range}' % [
        c.dashboardUIDPrefix,
        std.join('', ['&var-%s=${__data.fields.%s}' % [f, f] for f in fields]),
        std.join('', ['&${%s:queryparam}' % v for v in carry]),
      ],
    };
    if on == null then { fieldConfig+: { defaults+: { links: [link] } } }
    else { fieldConfig+: { overrides+: [{
      matcher: { id: 'byName', options: on },
      properties: [{ id: 'links', value: [link] }],
    }] } },

  // A table of several queries as one: merged on their labels, each query's value a column with
  // its unit (`columns`: refId -> [name, unit]; a refId left out is hidden, as `exclude` are).
  mergedTable(columns, exclude):: {
    fieldConfig+: { overrides+: [
      {
        matcher: { id: 'byName', options: 'Value #%s' % ref },
        properties: [{ id: 'unit', value: columns[ref][1] }],
      }
      for ref in std.objectFields(columns)
    ] },
    transformations: [
      { id: 'merge', options: {} },
      {
        id: 'organize',
        options: {
          excludeByName: { [k]: true for k in exclude },
          renameByName: { ['Value #%s' % ref]: columns[ref][0] for ref in std.objectFields(columns) },
        },
      },
    ],
  },

  row(id, title):: {
    id: id,
    type: 'row',
    title: title,
    collapsed: false,
    gridPos: { w: 24, h: 1 },
    panels: [],
  },

  // A panel of `type`, `w` x `h` grid units, showing `targets` (queries).
  panel(id, type, title, description, w, h, targets):: {
    id: id,
    type: type,
    title: title,
    description: description,
    datasource: $.datasource,
    gridPos: { w: w, h: h },
    targets: targets,
    fieldConfig: { defaults: {}, overrides: [] },
    options: {},
  },

  unit(u):: { fieldConfig+: { defaults+: { unit: u } } },

  // Thresholds: green below `value`, `color` from it on.
  threshold(value, color='red'):: { fieldConfig+: { defaults+: { thresholds: {
    mode: 'absolute',
    steps: [{ color: 'green', value: null }, { color: color, value: value }],
  } } } },

  // A table's columns: hide `exclude`, rename `Value` to `value` (if given).
  organize(exclude, value=null):: { transformations: [{
    id: 'organize',
    options: { excludeByName: { [k]: true for k in exclude } }
             + (if value == null then {} else { renameByName: { Value: value } }),
  }] },

  // A query as Grafana sends it: a range query, or an instant one (tables, stats).
  query(refId, expr, legend=null, instant=false, format='time_series'):: {
    refId: refId,
    datasource: $.datasource,
    expr: expr,
    range: !instant,
    instant: instant,
    format: format,
  } + (if legend == null then {} else { legendFormat: legend }),

  // The cluster variable: every cluster the job selector finds, "All" by default.
  clusterVariable(c):: $.labelVariable(
    'cluster', 'Cluster', 'diskprobe_build_info{%s}' % std.join(', ', [m for m in [c.jobSelector, c.clusterSelector] if m != '']),
    multi=true, labelName=c.clusterLabel,
  ),

  datasourceVariable(c):: {
    name: 'datasource',
    label: 'Data source',
    type: 'datasource',
    query: 'prometheus',
    current: {},
    hide: 0,
    refresh: 1,
    options: [],
  } + (if c.datasourceRegex == '' then {} else { regex: c.datasourceRegex }),

  // A variable whose values are label_values(`selector`, `labelName`); `multi` lets several be
  // chosen and adds "All" (.*, which also matches series without the label).
  labelVariable(name, label, selector, multi=false, labelName=name):: {
    name: name,
    label: label,
    type: 'query',
    datasource: $.datasource,
    query: { query: 'label_values(%s, %s)' % [selector, labelName], refId: 'StandardVariableQuery' },
    refresh: 2,
    multi: multi,
    includeAll: multi,
    current: {},
    options: [],
    sort: 1,
    hide: 0,
  } + (if multi then { allValue: '.*' } else {}),
}
