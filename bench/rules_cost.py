#!/usr/bin/env python3
"""Helpers of bench/rules_cost.sh (standard library only).

    rules_cost.py tiers URL OUTDIR        rules loaded in the Prometheus at URL, split into tiers:
                                          OUTDIR/tier-N.json holds the recording rules that read
                                          only raw series and the recordings of earlier tiers;
                                          prints the number of tiers
    rules_cost.py measure URL END PAIRS   evaluates every rule's expression at END (Unix seconds)
                                          with stats=all and prints the cost table

The cost of a rule: `totalQueryableSamples` of its expression at its group's last evaluation in
the data (a week of 1-minute scrapes; alerting groups at the end), divided by the target-profile
pairs and by its group's interval in minutes:
samples read per pair per minute. `peakSamples` is the most samples it held at once. Its chunks
(Mimir's -querier.max-fetched-chunks-per-query counts them): for every series each selector of
the expression reads, one chunk, plus one per 120 samples beyond the first 120 (a range selector
inside a subquery reads the subquery's range too), extrapolated from PAIRS to the fleet of
5,000 nodes x 8 targets x 2 profiles. Annotation templates run queries only for alerts that are
active, which this does not count.
"""

import json
import math
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

FLEET_PAIRS = 5000 * 8 * 2
MIMIR_CHUNKS = 2_000_000
RECORDED = re.compile(r"\bdiskprobe(?:_cohort)?:[a-zA-Z0-9_:]+")


def get(url, path, **params):
    q = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url}{path}?{q}", timeout=600) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        raise SystemExit(f"{path} {params}: {e}: {e.read().decode()}")
    if body.get("status") != "success":
        raise SystemExit(f"{path} {params}: {body}")
    return body["data"]


def seconds(d):
    units = dict(ms=0.001, s=1, m=60, h=3600, d=86400, w=604800, y=31536000)
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", d))


def rules(url):
    """[(group, interval seconds, rule dict)] in file order."""
    out = []
    for g in get(url, "/api/v1/rules")["groups"]:
        for r in g["rules"]:
            out.append((g["name"], g["interval"], r))
    return out


def tiers(url, outdir):
    recording = [(g, i, r) for g, i, r in rules(url) if r["type"] == "recording"]
    tier = {}
    pending = list(recording)
    while pending:
        left = []
        for g, i, r in pending:
            reads = set(RECORDED.findall(r["query"])) - {r["name"]}
            if all(name in tier for name in reads):
                tier[r["name"]] = 1 + max((tier[name] for name in reads), default=0)
            else:
                left.append((g, i, r))
        if len(left) == len(pending):
            raise SystemExit(f"rules read recordings no rule makes: {[r['name'] for _, _, r in left]}")
        pending = left
    count = max(tier.values())
    for k in range(1, count + 1):
        groups = {}
        for g, i, r in recording:
            if tier[r["name"]] == k:
                groups.setdefault(g, dict(name=g, interval=f"{int(i)}s", rules=[]))["rules"].append(
                    dict(record=r["name"], expr=r["query"], **({"labels": r["labels"]} if r.get("labels") else {}))
                )
        with open(f"{outdir}/tier-{k}.json", "w") as f:
            json.dump(dict(groups=list(groups.values())), f)
    print(count)


# ---------------------------------------------------------------------------------------------
# Selectors of an expression, for the chunk count.

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset", "inf", "nan",
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
}
LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
TOKEN = re.compile(
    r'\s+|(?P<str>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`)|(?P<brace>\{(?:"(?:[^"\\]|\\.)*"|[^}"])*\})|(?P<bracket>\[[^\]]*\])'
    r"|(?P<dur>(?:\d+(?:ms|s|m|h|d|w|y))+)|(?P<num>\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![a-zA-Z_:]))|(?P<id>[a-zA-Z_:][a-zA-Z0-9_:]*)|(?P<op>.)"
)


def selectors(expr):
    """[(selector text without range, range seconds, offset text)] of every vector selector."""
    tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in TOKEN.finditer(expr) if m.lastgroup]
    out, stack, k = [], [], 0
    while k < len(tokens):
        kind, text = tokens[k]
        nxt = tokens[k + 1] if k + 1 < len(tokens) else (None, None)
        if kind == "op" and text == "(":
            stack.append(len(out))
        elif kind == "op" and text == ")":
            start = stack.pop()
            if nxt[0] == "bracket" and ":" in nxt[1]:  # a subquery: its range adds to the inner ones
                extra = seconds(nxt[1].split(":")[0])
                for s in out[start:]:
                    s[1] += extra
                k += 1
        elif kind == "id" and text.lower() in LISTS and nxt[1] == "(":
            depth = 0
            while k < len(tokens):  # skip the label list
                if tokens[k][1] == "(":
                    depth += 1
                elif tokens[k][1] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
        elif kind == "id" and text.lower() not in KEYWORDS and nxt[1] != "(":
            sel, rng, offset = text, 0.0, ""
            if nxt[0] == "brace":
                sel += nxt[1]
                k += 1
                nxt = tokens[k + 1] if k + 1 < len(tokens) else (None, None)
            if nxt[0] == "bracket":
                rng = seconds(nxt[1])
                k += 1
                nxt = tokens[k + 1] if k + 1 < len(tokens) else (None, None)
            if nxt[1] == "offset":
                offset = tokens[k + 2][1]
                k += 2
            out.append([sel, rng, offset])
        elif kind == "brace" and (k == 0 or tokens[k - 1][0] != "id"):
            out.append([text, 0.0, ""])  # a selector without a metric name
        k += 1
    return out


def chunks(url, end, expr):
    """Chunks the selectors of `expr` fetch at `end`: per series, 1 + ceil((samples - 120) / 120)."""
    total = 0
    for sel, rng, offset in selectors(expr):
        off = f" offset {offset}" if offset else ""
        window = f"{int(rng)}s" if rng else "5m"  # an instant selector looks back 5 minutes
        result = get(url, "/api/v1/query", query=f"count_over_time({sel}[{window}]{off})", time=end)["result"]
        for s in result:
            n = float(s["value"][1])
            total += 1 + max(0, math.ceil((n - 120) / 120))
    return total


def last_evaluation(url, end, group_rules, interval):
    """When a group was last evaluated at or before `end` in the backfilled data: the newest
    sample of its recordings (alerting groups: `end`)."""
    newest = None
    for r in group_rules:
        if r["type"] != "recording":
            continue
        for s in get(url, "/api/v1/query", query=f"{r['name']}[{int(interval)}s]", time=end)["result"]:
            t = max(float(v[0]) for v in s["values"])
            newest = t if newest is None else max(newest, t)
    return newest if newest is not None else float(end)


def measure(url, end, pairs):
    pairs = int(pairs)
    rows, total = [], 0.0
    all_rules = rules(url)
    at = {}
    for group, interval, _ in all_rules:
        if group not in at:
            at[group] = last_evaluation(url, end, [r for g, _, r in all_rules if g == group], interval)
    for group, interval, r in all_rules:
        name = r.get("name")
        # Each rule at its group's last evaluation: rules of a group read the samples of the same
        # evaluation, as in Prometheus.
        data = get(url, "/api/v1/query", query=r["query"], time=at[group], stats="all")
        samples = data["stats"]["samples"]
        read, peak = samples["totalQueryableSamples"], samples["peakSamples"]
        per_minute = read / pairs / (interval / 60)
        total += per_minute
        fleet_chunks = chunks(url, at[group], r["query"]) * FLEET_PAIRS / pairs
        rows.append((group, int(interval), name, read, per_minute, peak * FLEET_PAIRS / pairs, fleet_chunks))
    print(f"{pairs} target-profile pairs; figures per pair per minute at 1-minute scrapes")
    print()
    print("| group (interval) | rule | samples per evaluation | per pair per minute | peak samples, fleet | chunks per evaluation, fleet |")
    print("|---|---|---|---|---|---|")
    for group, interval, name, read, per_minute, peak, fleet_chunks in rows:
        print(f"| `{group}` ({interval // 60} m) | `{name}` | {read:,} | {per_minute:.2f} | {peak:,.0f} | {fleet_chunks:,.0f} |")
    heaviest = max(rows, key=lambda r: r[6])
    print()
    print(f"all rules: {total:.1f} samples per pair per minute")
    print(f"heaviest evaluation at 5,000 nodes x 8 targets x 2 profiles: {heaviest[2]} ({heaviest[0]}), "
          f"{heaviest[6]:,.0f} chunks ({heaviest[6] / MIMIR_CHUNKS:.1%} of Mimir's default {MIMIR_CHUNKS:,})")


def main(argv):
    if len(argv) == 4 and argv[1] == "tiers":
        tiers(argv[2], argv[3])
    elif len(argv) == 5 and argv[1] == "measure":
        measure(argv[2], argv[3], argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
