"""What diskprobe_exporter exports, as the crate says it: the facts every model of the scenario
suites takes from `exposition.json` beside this file, and nowhere else.

`exposition.json` is written by the test `exposition_facts` of the `rules` test binary
(tests/rules/exposition_facts.rs) from the agent's own exposition: the real binary's /metrics
(every family, its type and its label names, the classic latency buckets of the default layout,
the built-in profiles' settings) and the library's store for what one scrape does not show (how
many runs `diskprobe_probe_recent_runs` counts, how many syncing runs
`diskprobe_probe_recent_sync_latency_seconds` takes the least of). The test fails when the file
is not what the agent exports; `UPDATE_GENERATED=1 cargo test --test rules exposition_facts::`
(or `.ci/regenerate`) rewrites it.

The models (model.py, fleet.py, chaos.py, headroom.py) read the numbers here (`get()`), and every
series they write goes through `check()`: a family the agent does not export, or a label it does
not put on that family, fails the generator instead of testing the rules against series no agent
sends. `generate.py --facts FILE` reads another file (tests/rules/scenario_generator.rs changes a
fact and sees the suites follow). Standard library only.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PATH = os.path.join(HERE, "exposition.json")

# Labels that the scrape adds to every series, not the agent: Prometheus' `job` and `instance`,
# and the target labels the Kubernetes monitors keep (a ServiceMonitor's `service`, the
# `endpoint` of a second monitor, a pod's name before it is dropped).
SCRAPE_LABELS = frozenset({"job", "instance", "pod", "service", "endpoint", "container", "namespace"})

# Series of other exporters the rules read beside the agent's: Prometheus' own `up`, and
# kube-state-metrics' PersistentVolume info (the StorageClass cohorts).
FOREIGN = {
    "up": ("gauge", frozenset()),
    "kube_persistentvolume_info": ("gauge", frozenset({"persistentvolume", "storageclass"})),
}

HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


class ExpositionMismatch(ValueError):
    """A model wrote a series the agent does not export as written."""


class Facts:
    """The facts of one `exposition.json`."""

    def __init__(self, data, path):
        self.path = path
        self.families = data["families"]
        # The classic buckets' upper bounds, as the agent writes them in `le` (+Inf left out),
        # and as numbers.
        self.latency_le = list(data["latency_buckets"])
        self.latency_bounds = [float(b) for b in self.latency_le]
        self.sync_latency_le = list(data["sync_latency_buckets"])
        self.sync_latency_bounds = [float(b) for b in self.sync_latency_le]
        self.recent_runs = int(data["recent_runs"])
        self.recent_sync_runs = int(data["recent_sync_runs"])
        self.profiles = data["profiles"]
        self._checked = set()

    def family_of(self, name):
        """The family a series name belongs to (a histogram's `_bucket`, `_count` and `_sum`
        belong to the histogram), and that family's facts; None when the agent has none."""
        if name in self.families:
            return name, self.families[name]
        for suffix in HISTOGRAM_SUFFIXES:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and self.families.get(base, {}).get("type") == "histogram":
                return base, self.families[base]
        return None, None

    def kind(self, name):
        """The type of the family of series `name` (gauge, counter, histogram), or of a foreign
        series."""
        if name in FOREIGN:
            return FOREIGN[name][0]
        family, facts = self.family_of(name)
        if family is None:
            raise ExpositionMismatch(f"{name}: the agent exports no such family ({self.path})")
        return facts["type"]

    def check(self, name, labels):
        """Fails unless the agent exports series `name` with every label name of `labels` (a
        dict), and, for a latency histogram's bucket, its `le` among the layout's bounds."""
        key = (name, frozenset(labels), labels.get("le"))
        if key in self._checked:
            return
        if name in FOREIGN:
            family, allowed = name, set(FOREIGN[name][1])
        else:
            family, facts = self.family_of(name)
            if family is None:
                raise ExpositionMismatch(f"{name}: the agent exports no such family ({self.path})")
            allowed = set(facts["labels"])
            if name == family + "_bucket":
                allowed.add("le")
        extra = set(labels) - allowed - SCRAPE_LABELS
        if extra:
            raise ExpositionMismatch(
                f"{name}: the agent puts no label {', '.join(sorted(extra))} on it "
                f"(it has {', '.join(sorted(allowed)) or 'none'}; {self.path})"
            )
        bounds = {
            "diskprobe_io_latency_seconds_bucket": self.latency_le,
            "diskprobe_sync_latency_seconds_bucket": self.sync_latency_le,
        }.get(name)
        if bounds is not None and str(labels.get("le")) not in bounds + ["+Inf"]:
            raise ExpositionMismatch(f"{name}: le={labels.get('le')!r} is not a bucket of the agent's layout ({self.path})")
        self._checked.add(key)

    def profile(self, name):
        """A built-in profile's settings as `diskprobe_profile_info` labels them: rw, block_size,
        iodepth, rate_iops (0: uncapped)."""
        if name not in self.profiles:
            raise ExpositionMismatch(f"{name}: no built-in profile of that name ({self.path})")
        return self.profiles[name]


_path = [os.environ.get("DISKPROBE_EXPOSITION_FACTS") or DEFAULT_PATH]
_loaded = []


def use(path):
    """Reads the facts from `path` from now on (before the first `get()`)."""
    if _loaded:
        raise RuntimeError("the facts were read already")
    _path[0] = path


def get():
    """The facts (read once)."""
    if not _loaded:
        with open(_path[0]) as f:
            _loaded.append(Facts(json.load(f), _path[0]))
    return _loaded[0]
