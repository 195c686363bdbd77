#!/usr/bin/env python3
"""Checks dashboards against Grafana's own schema, from the grafana-foundation-sdk package
(generated from Grafana's schemas; the version is pinned in .ci/run).

Each dashboard is decoded into the SDK's typed models (the dashboard, its variables, every
panel with its plugin's options and field config, every Prometheus query) and encoded back. A key
that Grafana's schema does not know is dropped by that round trip, and a value of the wrong shape
changes: either is reported, with its path, and the exit status is 1. Keys the round trip adds are
the schema's defaults and are fine.

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


def main(paths):
    plugins.register_default_plugins()
    failed = False
    for path in paths:
        with open(path) as f:
            original = json.load(f)
        decoded = json.loads(json.dumps(Dashboard.from_json(original), cls=JSONEncoder))
        for problem in differences(original, decoded):
            print(f"{path}: {problem}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
