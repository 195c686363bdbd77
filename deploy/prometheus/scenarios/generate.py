#!/usr/bin/env python3
"""Generates the scenario suites of deploy/prometheus/rules.yml for the engines' rule tests
(`promtool test rules`, `vmalert-tool unittest`), and the scenario table of docs/rules-design.md.

The series are not typed by hand: a model of what diskprobe_exporter exports is driven by
scenarios that say what happens to a disk ("one slow run", "a sustained x4 regression on NVMe",
"the agent restarts"). Every fact of the exposition the models use (names, labels, bucket bounds,
recent-run counts, the built-in profiles) comes from the crate: exposition.json, which the
`rules` test binary keeps equal to what the agent exports (facts.py). The suites:

- one-target: the scenarios of one_target.py and headroom.py (model.py, expect.py), each stating
  for every alert whether it fires and from when; every alert is checked at every checkpoint;
- fleet SEED: a week of 41 disks side by side, drawn from SEED (fleet.py); `fleet exact`: a small
  cohort without noise, whose annotations are checked exactly;
- chaos SEED: what real fleets do to the series (two scrapes of one agent, a rollout with
  maxSurge, kernel names that swap with and without staleness markers); fails if any rule fails
  to evaluate (chaos.py).

    python3 deploy/prometheus/scenarios/generate.py one-target OUT.json
    python3 deploy/prometheus/scenarios/generate.py fleet 1001 OUT.json
    python3 deploy/prometheus/scenarios/generate.py chaos 1 OUT.json
    python3 deploy/prometheus/scenarios/generate.py table [--write docs/rules-design.md]
    python3 deploy/prometheus/scenarios/generate.py openmetrics DIR [--nodes N --base T --days D]
    promtool test rules OUT.json

`--engine prometheus2` (the default: Debian 12's 2.42), `prometheus3` (3.5 LTS) or
`victoriametrics` (vmalert-tool) computes the expected values for that engine's ranges and
storage (common.py, "The engine"); the alerts, their labels and firing times are the same for all.
OUT.json is YAML (JSON is a subset) and names rules.yml by absolute path; the `rules` test binary
(tests/rules/prometheus_rules.rs) runs every suite on every engine.

promtool evaluates every rule group at the suite's evaluation interval, whatever the group's own
`interval` (the hourly baseline group included); the one-target suite uses 5 minutes, the
shortest interval of the rules, so firing times are on a 5-minute grid. The expected annotations
are computed here the way the engine computes them, from the same samples and at the same
evaluations. Standard library only.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import facts  # noqa: E402
from common import ENGINES, GROUP_ORDER, RULES, for_engine, set_engine  # noqa: E402

# The marks around the generated table in docs/rules-design.md (`table --write`).
TABLE_BEGIN = "<!-- scenario table: generate.py table --write docs/rules-design.md -->"
TABLE_END = "<!-- end of the scenario table -->"


def one_target_suite(only=None, quick=False):
    """The one-target scenarios' suite (those named in `only`, when given; with `quick`, the
    cheapest in which every alert fires, expect.quick)."""
    from expect import scenarios
    from model import EVAL

    return dict(
        rule_files=[RULES],
        evaluation_interval=f"{EVAL}s",
        group_eval_order=GROUP_ORDER,
        tests=[s.test_group() for s in scenarios(only, quick)],
    )


def table():
    """The scenario table of docs/rules-design.md."""
    import fleet
    from expect import scenarios

    lines = [
        "| scenario | what happens | onset | alerts that fire, relative to the onset (all others stay silent throughout) |",
        "|---|---|---|---|",
    ]
    lines += [s.row() for s in scenarios()]
    lines += fleet.rows()
    return "\n".join(lines)


def write_table(doc):
    """Replaces the table between `TABLE_BEGIN` and `TABLE_END` in `doc`."""
    with open(doc) as f:
        text = f.read()
    if text.count(TABLE_BEGIN) != 1 or text.count(TABLE_END) != 1:
        raise SystemExit(f"{doc}: no single pair of marks {TABLE_BEGIN!r} ... {TABLE_END!r}")
    head, rest = text.split(TABLE_BEGIN)
    _, tail = rest.split(TABLE_END)
    new = f"{head}{TABLE_BEGIN}\n{table()}\n{TABLE_END}{tail}"
    if new != text:
        with open(doc, "w") as f:
            f.write(new)


def write_suite(suite, out):
    with open(out, "w") as f:
        json.dump(for_engine(suite), f)


def seed(text):
    """A fleet seed: a number, or `exact` (the small cohort without noise)."""
    if text == "exact":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a seed (a number, or exact): {text!r}") from None


def parser():
    p = argparse.ArgumentParser(
        prog="generate.py",
        description="Generates the rule-test scenario suites of deploy/prometheus/rules.yml, "
        "the scenario table of docs/rules-design.md and the bench fleet's OpenMetrics.",
        epilog="Every fact of the agent's exposition comes from --facts (exposition.json, "
        "written by `UPDATE_GENERATED=1 cargo test --test rules exposition_facts::`).",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="prometheus2",
        help="compute expected values for this engine (default: %(default)s, Debian 12's 2.42)",
    )
    p.add_argument(
        "--facts",
        metavar="FILE",
        default=facts.DEFAULT_PATH,
        help="the facts of the agent's exposition (default: exposition.json beside this script)",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    one = sub.add_parser("one-target", help="the one-target scenarios' suite")
    one.add_argument("out", metavar="OUT.json")
    one.add_argument("--only", metavar="NAME", action="append", help="only this scenario (repeatable)")
    one.add_argument(
        "--quick",
        action="store_true",
        help="only the cheapest scenarios in which, together, every alert of the suite fires",
    )
    fl = sub.add_parser("fleet", help="a week of a fleet drawn from SEED, or the exact small cohort")
    fl.add_argument("seed", type=seed, metavar="SEED|exact")
    fl.add_argument("out", metavar="OUT.json")
    ch = sub.add_parser("chaos", help="the rule-chaos suite drawn from SEED")
    ch.add_argument("seed", type=int, metavar="SEED")
    ch.add_argument("out", metavar="OUT.json")
    tb = sub.add_parser("table", help="print the scenario table of docs/rules-design.md")
    tb.add_argument("--write", metavar="DOC", help="replace the table between its marks in DOC instead")
    ls = sub.add_parser("list", help="print the one-target scenarios' names")
    ls.add_argument("--quick", action="store_true", help="only those of the quick suite")
    om = sub.add_parser("openmetrics", help="bench/rules_cost.sh's fleet as OpenMetrics, a file per day; prints the target-profile pairs")
    om.add_argument("dir", metavar="DIR")
    om.add_argument("--nodes", type=int, default=2, help="nodes of 8 disks (default %(default)s)")
    om.add_argument("--base", type=int, default=0, help="Unix seconds of the first sample (default %(default)s)")
    om.add_argument("--days", type=int, default=7, help="days (default %(default)s)")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    facts.use(args.facts)
    set_engine(args.engine)
    if args.command == "one-target":
        write_suite(one_target_suite(args.only, args.quick), args.out)
    elif args.command == "fleet":
        import fleet

        write_suite(fleet.suite(args.seed), args.out)
    elif args.command == "chaos":
        import chaos

        write_suite(chaos.suite(args.seed), args.out)
    elif args.command == "table":
        if args.write:
            write_table(args.write)
        else:
            print(table())
    elif args.command == "list":
        from expect import scenarios

        for s in scenarios(quick_only=args.quick):
            print(s.name)
    elif args.command == "openmetrics":
        import fleet

        fleet.openmetrics(args.dir, args.nodes, args.base, args.days)
    return 0


if __name__ == "__main__":
    sys.exit(main())
