#!/usr/bin/env python3
"""Regenerates prometheusrule.yaml from ../prometheus/rules.yml (run from anywhere)."""
import pathlib

here = pathlib.Path(__file__).resolve().parent
rules = (here.parent / "prometheus" / "rules.yml").read_text()
body = rules[rules.index("groups:"):]
indented = "\n".join(("  " + l) if l.strip() else l for l in body.splitlines())
(here / "prometheusrule.yaml").write_text(
    "# Generated from deploy/prometheus/rules.yml (tests/deploy_files.rs checks they agree):\n"
    "#   python3 deploy/kubernetes/gen_prometheusrule.py\n"
    "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: diskprobe-exporter\nspec:\n"
    + indented + "\n"
)
