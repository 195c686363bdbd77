// The runbook: runbook/runbook.md with the mixin's values filled in, rendered as docs/runbook.md
// and as the runbook dashboard (one text panel per section; an alert's runbook_url opens its
// panel with the alert's labels as the dashboard's variables, which Grafana fills into the
// panel's `$label`s).
//
// In runbook/runbook.md, `@name@` is a value of `_config` (a number as %g, a string as it is),
// `@name:pct@` a share as a percentage (0.9: 90%), `@name:share@` a share in words (0.5: half),
// `@name:ms@` and `@name:us@` seconds in milliseconds and microseconds, `@name:min@` in minutes;
// in an alert's section `@for@` and `@keep_firing_for@` are its rule's, and `@silence@` its
// amtool line. A name the mixin does not have fails the rendering.
// Split once (an import is evaluated once; std.split of 0.18 walks the text in jsonnet).
local template = importstr '../runbook/runbook.md';
local lines = std.split(template, '\n');
local heads = [i for i in std.range(0, std.length(lines) - 1) if std.startsWith(lines[i], '## ')];
local starts = [0] + heads;
local ends = heads + [std.length(lines)];
// The sections: { title, text }; the text before the first `## ` heading is the first, with
// title ''.
local sections = [
  {
    title: if k == 0 then '' else std.substr(lines[starts[k]], 3, std.length(lines[starts[k]]) - 3),
    text: std.join('\n', lines[starts[k]:ends[k]]),
  }
  for k in std.range(0, std.length(starts) - 1)
];
local ids = { [sections[i].title]: i + 1 for i in std.range(1, std.length(sections) - 1) };
assert std.length(std.objectFields(ids)) == std.length(sections) - 1 : 'runbook/runbook.md: a section title twice';
// The runbook dashboard's variables: every `$label` the runbook's queries and silences name.
local variables = ['cluster', 'job', 'instance', 'target', 'profile', 'device', 'rule', 'serial', 'cohort', 'model', 'rotational', 'limit'];
local word = std.set(std.stringChars('abcdefghijklmnopqrstuvwxyz_'));
// The variables each section names (`$name`), in `variables`' order.
local named = {
  [s.title]:
    local after = std.split(s.text, '$')[1:];
    [
      v
      for v in variables
      if std.length([
        p
        for p in after
        if std.startsWith(p, v) && (std.length(p) == std.length(v) || !std.member(word, p[std.length(v)]))
      ]) > 0
    ]
  for s in sections[1:]
};

{
  variables:: variables,

  sections:: sections,

  // The panel of a section in the runbook dashboard: its position, from 1.
  panelId(title)::
    assert std.objectHas(ids, title) : 'runbook/runbook.md: no section "## %s"' % title;
    ids[title],

  // The variables the section of `title` names (`$name`), in `variables`' order.
  variablesOf(title):: named[title],

  local seconds(d) =
    local unit = std.substr(d, std.length(d) - 1, 1);
    std.parseInt(std.substr(d, 0, std.length(d) - 1)) * { s: 1, m: 60, h: 3600, d: 86400 }[unit],
  local duration(s) =
    if s % 86400 == 0 then '%dd' % (s / 86400)
    else if s % 3600 == 0 then '%dh' % (s / 3600)
    else if s >= 3600 then '%dh%dm' % [std.floor(s / 3600), (s % 3600) / 60]
    else '%dm' % (s / 60),

  // The runbook's text with the values of `c` and of the alert rules `alerts` (a list of rules),
  // each section's silence from `about` (lib/links.libsonnet's table).
  render(c, alerts, about)::
    local rule(title) = [r for r in alerts if std.objectHas(r, 'alert') && r.alert == title];
    local format(v) = if std.isNumber(v) then '%g' % v else v;
    local transform(name, how) =
      assert std.objectHas(c, name) : 'runbook/runbook.md names @%s@, not in _config' % name;
      local v = c[name];
      {
        '': format(v),
        pct: '%g%%' % (v * 100),
        share: if v == 0.5 then 'half' else '%g%%' % (v * 100),
        ms: '%g' % (v * 1000),
        us: '%g' % (v * 1000000),
        min: '%g' % (v / 60),
      }[how];
    local silence(title, r) =
      local a = about[title];
      local keep = if std.objectHas(r, 'keep_firing_for') then r.keep_firing_for else '0s';
      local total = duration(seconds(a.repair) + seconds(keep));
      std.join('\n', [
        '```sh',
        if keep == '0s' then '# the repair (%s); adjust to yours' % a.repair
        else '# the repair (%s) plus keep_firing_for (%s): the alert fires that long after the fix' % [a.repair, keep],
        'amtool silence add --duration=%s --comment="%s" alertname=%s %s' % [
          total,
          'repair under way',
          title,
          std.join(' ', ['%s="$%s"' % [l, l] for l in a.silence]),
        ],
        '```',
      ]);
    local fill(title, text) =
      local parts = std.split(text, '@');
      assert std.length(parts) % 2 == 1 : 'runbook/runbook.md, section "%s": an @ without its pair' % title;
      local r = rule(title);
      std.join('', [
        if i % 2 == 0 then parts[i]
        else
          local key = parts[i];
          if key == 'silence' then (assert std.length(r) == 1 : '@silence@ outside an alert section'; silence(title, r[0]))
          else if key == 'for' || key == 'keep_firing_for' then (assert std.length(r) == 1 : '@%s@ outside an alert section' % key; r[0][key])
          else
            local nameHow = std.splitLimit(key, ':', 1);
            transform(nameHow[0], if std.length(nameHow) == 2 then nameHow[1] else '')
        for i in std.range(0, std.length(parts) - 1)
      ]);
    [
      { title: s.title, text: fill(s.title, s.text) }
      for s in sections
    ],
}
