#!/usr/bin/env python3
"""Checks dashboards against Grafana's own schema, from the grafana-foundation-sdk package
(generated from Grafana's schemas; the version is pinned in .ci/run).

Each dashboard is decoded into the SDK's typed models (the dashboard, its variables, every
panel with its plugin's options and field config, every Prometheus query) and encoded back. A key
that Grafana's schema does not know is dropped by that round trip, and a value of the wrong shape
changes: either is reported, with its path, and the exit status is 1. Keys the round trip adds are
the schema's defaults and are fine.

One exception, ANNOTATION_OPTIONS: the options of a Prometheus annotation query, which the
dashboard schema leaves to the data source (its AnnotationQuery is open) and the SDK does not
model. Grafana's Prometheus data source reads them (`step` becomes the query's interval;
`titleFormat`, `textFormat` and `tagKeys` name the event from the series' labels;
`useValueForTime` places it at the value, in milliseconds); only these, and only with a
Prometheus data source, are let through, each checked for its type.

    python3 grafana/check_schema.py grafana/*.json
"""

import json
import sys

from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard


def differences(original, decoded, path=""):
    if isinstance(original, dict) and isinstance(decoded, dict):
        for key, value in original.items():
            if key not in decoded:
                yield f"{path}/{key}: not in Grafana's schema"
            else:
                yield from differences(value, decoded[key], f"{path}/{key}")
    elif isinstance(original, list) and isinstance(decoded, list):
        if len(original) != len(decoded):
            yield f"{path}: {len(original)} items became {len(decoded)}"
        for i, (a, b) in enumerate(zip(original, decoded)):
            yield from differences(a, b, f"{path}[{i}]")
    elif original != decoded:
        yield f"{path}: {json.dumps(original)} became {json.dumps(decoded)}"


# Options of a Prometheus annotation query, and their types.
ANNOTATION_OPTIONS = {
    "step": str,
    "titleFormat": str,
    "textFormat": str,
    "tagKeys": str,
    "useValueForTime": bool,
}


def annotation_option_problems(dashboard):
    """Takes the Prometheus annotation options out of `dashboard` (in place); returns what is
    wrong with them."""
    problems = []
    for i, a in enumerate(dashboard.get("annotations", {}).get("list", [])):
        prometheus = a.get("datasource", {}).get("type") == "prometheus"
        for key, kind in ANNOTATION_OPTIONS.items():
            if key not in a:
                continue
            value = a.pop(key)
            where = f"/annotations/list[{i}]/{key}"
            if not prometheus:
                problems.append(f"{where}: an option of Prometheus annotations, on another data source")
            elif not isinstance(value, kind):
                problems.append(f"{where}: {json.dumps(value)} is not a {kind.__name__}")
    return problems


def main(paths):
    plugins.register_default_plugins()
    failed = False
    for path in paths:
        with open(path) as f:
            original = json.load(f)
        for problem in annotation_option_problems(original):
            print(f"{path}: {problem}")
            failed = True
        decoded = json.loads(json.dumps(Dashboard.from_json(original), cls=JSONEncoder))
        for problem in differences(original, decoded):
            print(f"{path}: {problem}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
