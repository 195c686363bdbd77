"""What the scenario suites share: promtool's series notation, and PromQL functions and Go
template functions computed exactly as the rule engine computes them (for the values in expected
annotations), and the queries of docs/runbook.md. Standard library only.

The engine (`--engine` of generate.py, `set_engine`): Prometheus 2 (Debian 12's 2.42) and
Prometheus 3 (3.5 LTS) differ in one thing the suites meet, a sample on a range's left edge. 2.x
includes it: `x[30m]` at 30m over samples every 5 minutes holds 7 (0m, 5m, ..., 30m). 3.x leaves
it out ("range selectors and lookback exclude samples coinciding with the left boundary", its
migration guide): 6. In promtool every sample and every evaluation sits on a grid, so a range's
left edge falls on a sample whenever the range is a multiple of the grid; the suites' values are
computed for the engine from the same samples (`range_points`, `prom_rate`) rather than
avoided by odd windows, since the bundled rules' windows are what operators run. Firing times and
labels do not depend on the engine; a suite's own check queries use windows whose left edge falls
between samples (`edge_free`), so they hold on both.
"""

import math
import os
import re

import facts

JOB = "diskprobe"
HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.abspath(os.path.join(HERE, "..", "rules.yml"))
RUNBOOK_FILE = os.path.abspath(os.path.join(HERE, "..", "..", "..", "docs", "runbook.md"))

# The rule groups in the order of rules.yml (promtool's order is otherwise random; vmalert-tool
# keeps the file's). Both tools evaluate every group at every step, so a rule sees the recordings
# of the groups before it from the same step; no rule reads one of its own group or depends on
# the order (tests/rules/rule_stages.rs), since Prometheus and vmalert run groups apart.
with open(RULES) as _rules:
    GROUP_ORDER = re.findall(r"^  - name: (\S+)$", _rules.read(), re.M)

SEVERITY = {
    "DiskprobeIOErrors": "critical",
    "DiskprobeTargetVanished": "critical",
    "DiskprobeDiskLost": "critical",
    "DiskprobeIOHung": "critical",
    "DiskprobeDiskSaturated": "info",
    "DiskprobeCohortSlowdown": "info",
}


def severity(alert):
    return SEVERITY.get(alert, "warning")


def seconds(duration):
    """A Prometheus duration of one unit (`5m`, `1h`, `30s`) in seconds."""
    m = re.fullmatch(r"([0-9]+)(s|m|h|d)", duration)
    if not m:
        raise ValueError(f"not a one-unit duration: {duration!r}")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def keep_firing_for(alert):
    """The `keep_firing_for` of `alert` in rules.yml, in seconds (0 without one): how long it
    keeps firing after its expression stops returning it, as the mixin renders it."""
    with open(RULES) as f:
        text = f.read()
    rules = re.split(r"(?m)^\s*- (?=alert:|record:)", text)
    mine = [r for r in rules if re.match(rf"alert: {alert}\s*$", r.split("\n", 1)[0])]
    if len(mine) != 1:
        raise ValueError(f"{alert}: {len(mine)} rules of that name in {RULES}")
    m = re.search(r"(?m)^\s*keep_firing_for: (\S+)\s*$", mine[0])
    return seconds(m.group(1)) if m else 0


def fmt(v):
    """A sample value as promtool reads it back exactly."""
    return repr(float(v)) if v != int(v) or abs(v) > 1e15 else str(int(v))


def labels_text(labels):
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if v != "") + "}"


def series_text(name, labels):
    """One input series in promtool's notation (`name{labels}`, empty labels left out), after
    checking that the agent exports such a series (facts.py): a model cannot test the rules
    against a family, a label or a bucket the agent never sends."""
    facts.get().check(name, {k: v for k, v in labels.items() if v != ""})
    return name + labels_text(labels)


def encode(values):
    """promtool's notation for one value (or None: absent) per scrape: `v+0xN` for repeats,
    `stale` where a series vanishes, `_xN` for N missing samples."""
    parts, i, n = [], 0, len(values)
    while i < n:
        v, j = values[i], i
        while j + 1 < n and values[j + 1] == v:
            j += 1
        count = j - i + 1
        if v is None:
            if i > 0:
                parts.append("stale")
                count -= 1
            if count:
                parts.append(f"_x{count}")
        else:
            parts.append(f"{fmt(v)}+0x{count - 1}" if count > 1 else fmt(v))
        i = j + 1
    return " ".join(parts)


class Track:
    """One series on the scrape grid, as pieces in time order: from scrape `i` on, the value is
    `value + inc * (k - i)` at scrape k (None: absent). Encodes to promtool's notation without a
    value per scrape."""

    def __init__(self):
        self.pieces = []

    def set(self, i, value, inc=0):
        if self.pieces and self.pieces[-1][0] == i:
            self.pieces[-1] = (i, value, inc)
        elif not self.pieces or self.pieces[-1][1:] != (value, inc) or inc:
            self.pieces.append((i, value, inc))

    def value_at(self, k):
        """The value at scrape k (None when absent)."""
        value = None
        for i, v, inc in self.pieces:
            if i > k:
                break
            value = None if v is None else v + inc * (k - i)
        return stored(value)

    def encode(self, n):
        parts, present = [], False
        if self.pieces and self.pieces[0][0] > 0:
            parts.append(f"_x{min(self.pieces[0][0], n)}")
        for j, (i, v, inc) in enumerate(self.pieces):
            end = min(self.pieces[j + 1][0] if j + 1 < len(self.pieces) else n, n)
            length = end - i
            if length <= 0:
                continue
            if v is None:
                if present:
                    parts.append("stale")
                    length -= 1
                if length:
                    parts.append(f"_x{length}")
                present = False
                continue
            present = True
            if length == 1:
                parts.append(fmt(v))
            else:
                parts.append(f"{fmt(v)}{'+' if inc >= 0 else '-'}{fmt(abs(inc))}x{length - 1}")
        return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# The engine: which samples a range holds.

ENGINES = ("prometheus2", "prometheus3", "victoriametrics")
_engine = {"left_open": False, "decimal": False}


def set_engine(name):
    """Computes every expected value for `name` (one of ENGINES) from now on."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r} (one of {', '.join(ENGINES)})")
    _engine["left_open"] = name != "prometheus2"
    _engine["decimal"] = name == "victoriametrics"


def left_open():
    """Whether ranges leave out a sample on their left edge (Prometheus 3, VictoriaMetrics)."""
    return _engine["left_open"]


def _pow10(n):
    """Go's math.Pow10 for the exponents a sample meets (a table product; 1 / 10^-n below 0)."""
    return float(10**n) if n >= 0 else 1 / float(10**-n)


def stored(v):
    """`v` as the engine's storage gives it back. VictoriaMetrics keeps a sample as a decimal
    mantissa and exponent, its integer part with at most 12 digits (15 above a million) once
    normalised, then divides (negative exponents) or multiplies back: 6/7 comes back as
    0.857142857142, 0.9499999999999998 as 0.95 (lib/decimal's FromFloat and ToFloat, as
    vmalert-tool 1.145 shows them). Prometheus keeps the float."""
    if not _engine["decimal"] or v is None or v == 0 or math.isnan(v) or math.isinf(v):
        return v
    sign, f = (-1, -v) if v < 0 else (1, v)
    if float(int(f)) == f and f < 2**63:
        u, scale = int(f), 0
        while u >= 1 << 55:
            u //= 10
            scale += 1
        while u and u % 10 == 0:
            u //= 10
            scale += 1
    else:
        scale, prec = 0, 1e12
        if f > 1e6 or f < 1e-6:
            if f > 1e6:
                prec = 1e15
            exp = max(-1022, min(1023, math.frexp(f)[1]))
            scale = int(exp * (math.log(2) / math.log(10)))
            f *= _pow10(-scale)
        while f < prec:
            frac, x = math.modf(f)
            if frac * prec < x:
                f = x
                break
            if (1 - frac) * prec < x:
                f = x + 1
                break
            f *= 100
            scale -= 2
        u = int(f)
        if u % 10 == 0:
            u //= 10
            scale += 1
    return sign * (u / _pow10(-scale) if scale < 0 else u * _pow10(scale))


# An alert link's variable, as the mixin renders it (lib/links.libsonnet): the variable set from
# the label where the alert has it.
_LINK_VAR = re.compile(r"\{\{ with \$labels\.([a-z0-9_]+) \}\}&var-([a-z_]+)=\{\{ \. \| urlquery \}\}\{\{ end \}\}")


def link_templates():
    """{alert: {annotation: template}}: the `dashboard_url` and `runbook_url` of each alert in
    rules.yml, as rendered (a quoted scalar, JSON's escapes)."""
    import json

    with open(RULES) as f:
        text = f.read()
    out = {}
    for rule in re.split(r"(?m)^\s*- (?=alert:|record:)", text):
        m = re.match(r"alert: (\S+)\s*$", rule.split("\n", 1)[0])
        if m:
            out[m.group(1)] = {
                k: json.loads(v) if v.startswith('"') else v
                for k, v in re.findall(r"(?m)^\s*(dashboard_url|runbook_url): (.*?)\s*$", rule)
            }
    return out


def expand_link(template, labels):
    """A link template as the engine expands it for an alert of `labels`: each variable whose
    label the alert has, its value escaped as Go's url.QueryEscape (`urlquery`) does."""
    from urllib.parse import quote_plus

    out = _LINK_VAR.sub(lambda m: f"&var-{m.group(2)}={quote_plus(labels[m.group(1)])}" if labels.get(m.group(1)) else "", template)
    if "{{" in out:
        raise ValueError(f"a link template this generator does not expand: {template!r}")
    return out


def with_links(suite):
    """`suite` with each expected alert's `dashboard_url` and `runbook_url`, expanded from
    rules.yml for its labels."""
    links = link_templates()
    for group in suite["tests"]:
        for test in group.get("alert_rule_test", []):
            for alert in test.get("exp_alerts", []):
                mine = links[test["alertname"]]
                alert["exp_annotations"] = dict(
                    alert.get("exp_annotations", {}),
                    **{k: expand_link(v, alert.get("exp_labels", {})) for k, v in mine.items()},
                )
    return suite


def for_engine(suite):
    """A generated suite as the engine's test tool reads it: each expected alert with its links
    (`with_links`); for vmalert-tool, the expression checks under its key
    (`metricsql_expr_test`), no `group_eval_order` (it evaluates the groups in the file's order,
    which no rule depends on), and each expected sample as its storage gives it back."""
    suite = with_links(suite)
    if not _engine["decimal"]:
        return suite
    suite = dict(suite)
    suite.pop("group_eval_order", None)
    tests = []
    for group in suite["tests"]:
        group = dict(group)
        checks = group.pop("promql_expr_test", None)
        if checks is not None:
            group["metricsql_expr_test"] = [
                dict(check, exp_samples=[dict(s, value=stored(s["value"])) for s in check.get("exp_samples", [])])
                for check in checks
            ]
        tests.append(group)
    suite["tests"] = tests
    return suite


def range_points(lo, hi, step):
    """The points of the grid of `step` (from 0) that a range from `lo` to `hi` holds: the
    samples of a series recorded every `step`, or a subquery's steps."""
    first = max(0, -(-lo // step) * step)
    if left_open() and first == lo:
        first += step
    return range(first, hi + 1, step)


def edge_free(seconds, step):
    """A check window of at least `seconds` whose left edge falls between samples of a grid of
    `step` (half a step further back), so that it holds the same samples on every engine."""
    return seconds + step // 2


def prom_rate(points, lo, hi):
    """rate() of a counter's `points` [(t, v)] (in time order, already the range's) over a range
    from `lo` to `hi`, as the engine's extrapolatedRate computes it, float operations in its
    order; None with fewer than 2 points."""
    if len(points) < 2:
        return None
    (t0, v0), (t1, v1) = points[0], points[-1]
    delta = v1 - v0
    prev = v0
    for _, v in points[1:]:
        if v < prev:  # a counter reset
            delta += prev
        prev = v
    sampled = t1 - t0
    average = sampled / (len(points) - 1)
    to_start, to_end = t0 - lo, hi - t1
    threshold = average * 1.1
    extrapolate_to = sampled
    if delta > 0 and v0 >= 0:
        to_zero = sampled * (v0 / delta)
        if to_zero < to_start:
            to_start = to_zero
    extrapolate_to += to_start if to_start < threshold else average / 2
    extrapolate_to += to_end if to_end < threshold else average / 2
    if left_open():
        # Prometheus 3 multiplies by one factor (extrapolation over the range's seconds): the
        # same value but for the last bits of a float.
        return delta * ((extrapolate_to / sampled) / (hi - lo))
    return delta * (extrapolate_to / sampled) / (hi - lo)


# ---------------------------------------------------------------------------------------------
# PromQL and Go template functions, exactly as Prometheus computes them.


def quantile(q, vals):
    vals = sorted(vals)
    n = len(vals)
    rank = q * (n - 1)
    lower = max(0, math.floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - math.floor(rank)
    return vals[lower] * (1 - weight) + vals[upper] * weight


def go_g4(v):
    return "%.4g" % v


def humanize(v):
    v = stored(v)
    if v == 0 or math.isnan(v) or math.isinf(v):
        return go_g4(v)
    if abs(v) >= 1:
        prefix = ""
        for p in ["k", "M", "G", "T", "P", "E", "Z", "Y"]:
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
        return go_g4(v) + prefix
    prefix = ""
    for p in ["m", "u", "n", "p", "f", "a", "z", "y"]:
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return go_g4(v) + prefix


def humanize1024(v):
    v = stored(v)
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return go_g4(v)
    prefix = ""
    for p in ["ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"]:
        if abs(v) < 1024:
            break
        prefix, v = p, v / 1024
    return go_g4(v) + prefix


def humanize_duration(v):
    v = stored(v)
    if v == 0:
        return go_g4(v) + "s"
    if abs(v) >= 1:
        sign, v = ("-", -v) if v < 0 else ("", v)
        d = int(v)
        seconds, minutes, hours, days = d % 60, d // 60 % 60, d // 3600 % 24, d // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return sign + go_g4(v) + "s"
    prefix = ""
    for p in ["m", "u", "n", "p", "f", "a", "z", "y"]:
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return go_g4(v) + prefix + "s"


def humanize_timestamp(v):
    """Go's time.Unix(v).UTC().String() for whole seconds, as `humanizeTimestamp` prints it."""
    import datetime

    t = datetime.datetime.fromtimestamp(v, datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


# ---------------------------------------------------------------------------------------------
# docs/runbook.md: the queries of each alert's section.


def runbook_queries():
    """{alert: [query, ...]}: the lines of the ```promql blocks in each `## Alert` section of
    docs/runbook.md (lines starting with # are comments). Queries name an alert's labels as
    `$label`, filled in with the labels of an alert that fires."""
    with open(RUNBOOK_FILE) as f:
        text = f.read()
    out, section = {}, None
    for block in re.split(r"(?m)^## ", text)[1:]:
        section = block.split("\n", 1)[0].strip()
        queries = []
        for code in re.findall(r"```promql\n(.*?)```", block, re.S):
            queries += [q.strip() for q in code.splitlines() if q.strip() and not q.strip().startswith("#")]
        if queries:
            out[section] = queries
    return out


# A cohort is named by `cohort`, or by `model` and `rotational`: the others are empty (absent).
COHORT_LABELS = ("cohort", "model", "rotational")


def fill(query, labels):
    """A runbook query with `$label` replaced by the alert's label values (the cohort labels and
    `cluster`, where an alert does not have them, by the empty string, which matches their
    absence)."""
    out = query
    labels = dict({k: "" for k in COHORT_LABELS + ("cluster",)}, **labels)
    for k in sorted(labels, key=len, reverse=True):
        out = out.replace(f"${k}", labels[k])
    leftover = re.findall(r"\$[a-z_]+", out)
    if leftover:
        raise ValueError(f"runbook query {query!r} names {leftover}, which the alert does not have")
    return out


def runbook_tests(alert, labels, eval_time):
    """promql_expr_test entries: each runbook query of `alert`, with its labels filled in, returns
    data at `eval_time` (seconds)."""
    return [
        dict(
            expr=f"clamp_max(count({fill(q, labels)}), 1)",
            eval_time=f"{eval_time}s",
            exp_samples=[dict(labels="{}", value=1)],
        )
        for q in runbook_queries().get(alert, [])
    ]
