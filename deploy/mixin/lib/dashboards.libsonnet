// Small builders for Grafana dashboards (schema 39, Grafana 11): panels, queries, variables and
// a flowing layout, so that a dashboard file says what it shows, not where.
{
  datasource:: { type: 'prometheus', uid: '${datasource}' },

  // A dashboard of `c`'s tags, refresh and uid prefix; `panels` are laid out by `layout`.
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
    annotations: { list: [] },
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
