// The mixin's configuration: override any of these with
//   (import 'mixin.libsonnet') + { _config+:: { jobSelector: 'job="storage-probe"' } }
{
  _config+:: {
    // Matchers that select diskprobe_exporter's series, as PromQL label matchers without braces:
    // every selector of every rule and every panel query starts with them.
    jobSelector: 'job="diskprobe"',
    // Further matchers restricting rules and dashboards to some clusters ('' for none), e.g.
    // 'cluster=~"prod-.*"'. Evaluated per cluster, rules need none.
    clusterSelector: '',
    // The label that tells clusters apart where several meet (Thanos, Mimir, a federated
    // Prometheus): kept by every aggregation and join, and the dashboards' `cluster` variable.
    clusterLabel: 'cluster',

    // Alert thresholds (docs/runbook.md explains each, rendered from them).
    latencyRegressionRatio: 2.5,  // median p99 of recent runs against the 7-day baseline
    latencyRegressionMinDeltaSeconds: 0.0001,  // ... and at least this much above it
    iopsDropRatio: 0.5,  // median IOPS of recent runs under this share of the baseline
    throughputDropRatio: 0.5,  // the same for throughput
    latencyDriftRatio: 2,  // median p99 of the last day against the baseline (a slow drift)
    syncLatencyP99Seconds: 0.01,  // p99 of a durability profile's syncs in each of its last 3 runs
    probeFailingRuns: 3,  // failed runs among the last 10 the agent counts
    ioErrorRuns: 2,  // runs with failed I/Os among the last 10
    probeStaleIntervals: 3.5,  // no finished run for this many probe intervals (jitter is <= 10%)
    diskSaturationQueue: 10,  // average queue size (aqu-sz) of a disk

    // Fleet rules (rules/fleet.libsonnet, alerts/fleet.libsonnet; docs/rules-design.md, "How the
    // rules are built"). Labels that change while the disk does not (a rollout, a monitor's
    // target labels): dropped by every rule that keeps a history, as `device` is (kernel names
    // swap at reboot).
    volatileLabels: ['pod', 'container', 'endpoint'],
    // A target's cohort: the `cohortLabel` of its diskprobe_target_info where set, else these
    // labels of the diskprobe_disk_info of the disk under it (the first one must be non-empty).
    cohortLabel: 'cohort',
    cohortDiskLabels: ['model', 'rotational'],
    // Kubernetes: a PersistentVolume's target (named `pvTargetPrefix` + the PV's name, as the
    // shipped discovery configuration names them) takes its cohort from its StorageClass
    // (kube-state-metrics' kube_persistentvolume_info) unless it is configured with one: gp3 and
    // io2 volumes report one model. `kubeStateMetricsSelector` selects kube-state-metrics.
    pvStorageClassCohorts: true,
    pvTargetPrefix: 'pv-',
    kubeStateMetricsSelector: 'job="kube-state-metrics"',
    cohortMinSize: 5,  // disks at like load a cohort needs to be a reference
    peerWindow: '12h',  // a disk's ratios to its peers are judged over this window
    peerMinHistory: '3h',  // ... once it has this much of them
    peerRatio: 1.6,  // median of a disk's p99 over its cohort's median (docs/rules-design.md, "The boundary")
    peerIntermittentRatio: 2,  // ... or the 80th percentile of it
    peerIntermittentSpread: 1.6,  // the 80th percentile counts when this far above the median
    peerScore: 2,  // modified z-score in the cohort (docs/rules-design.md, "The boundary")
    peerMADFloor: 0.01,  // least median absolute deviation of a cohort's ratios
    peerBusyRatio: 3,  // a disk this much busier than its cohort's median is not compared
    peerFor: '1h',  // DiskprobeSlowerThanPeers: for
    // DiskprobeFarSlowerThanPeers, the fast path: a disk whose median ratio to its cohort's median
    // over `peerFastWindow` is `peerFastRatio` or more (healthy disks of the tuning fleets reach
    // at most 3.5, bench/peer_scores.py; docs/rules-design.md, "The fast path"), for `peerFastFor`.
    peerFastRatio: 6,
    peerFastWindow: '30m',
    peerFastFor: '5m',
    // ... and keep_firing_for: an intermittent disk's 80th percentile can dip under its threshold
    // for an hour or two (a run of luck in which fewer than a fifth of its runs were slow).
    peerKeepFiringFor: '3h',
    // Critical alerts: how long they keep firing once their condition clears (an agent restart
    // empties its windows and its series for a minute; intermittent errors come and go).
    criticalKeepFiringFor: '1h',
    // ... but a disk gone (DiskprobeTargetVanished, DiskprobeDiskLost) only this long: one that
    // is back or retired stops paging at the second evaluation after it shows (within 10 minutes
    // at 5-minute evaluations). The agent keeps a gone disk's series across its restarts (its
    // state directory); this bridges the scrapes a restart misses.
    goneKeepFiringFor: '5m',
    diskLostFor: '10m',  // DiskprobeDiskLost: a volume that moves is attached elsewhere by then
    ioHungSeconds: 300,  // DiskprobeIOHung: the kernel has held a probe I/O this long
    cohortSlowdownRatio: 2,  // a cohort's median p99 over 6 hours against its best day
    currentMaxIntervalSeconds: 360,  // 30-minute "current" medians need runs at least this often
    currentSlowMaxIntervalSeconds: 3600,  // ... 3-hour ones at least this often
    // Headroom: disks against the limits they are sold with (rules/headroom.libsonnet).
    headroomNearLimitShare: 0.9,  // a disk at this share of a limit is near it
    headroomNearLimitFor: '15m',  // ... for this long: DiskprobeNearLimit
    headroomThrottledFor: '10m',  // near a limit with the latency signature this long: DiskprobeThrottled
    headroomThrottledRatio: 3,  // the signature: gentle p99 above this many times its calm level
    headroomThrottledMinDeltaSeconds: 0.0005,  // ... and at least this much above it
    headroomCalmShare: 0.5,  // the calm level is the gentle p99 under this share of every limit
    headroomRunsInterval: '5m',  // how often completed capacity runs are sampled (interval and offset)
    // The cloud's own word (rules/cloud.libsonnet; [cloud_stats]): DiskprobeThrottled fires for
    // a volume that spent this share of the last 5 minutes or more over its own limit, or over
    // its instance's, for headroomThrottledFor; where the cloud says so, the probes' signature
    // is not asked.
    cloudThrottledShare: 0.1,
    // Devices left out of the workload: volumes, whose I/O counts again on the disks under them.
    headroomVolumeDevices: 'dm-[0-9]+|md[0-9].*',

    // The base URL of the Grafana the mixin's dashboards are installed in, without a trailing
    // slash, e.g. 'https://grafana.example.com' (docs/deployment.md, "Alert links"). Every
    // alert's dashboard_url opens its dashboard there with the alert's labels as variables, and
    // its runbook_url its section of the runbook dashboard (docs/runbook.md, rendered from
    // runbook/runbook.md, with the alert's labels filled into its queries). '' renders the same
    // links as paths on the Grafana host ('/d/...').
    grafanaURL: '',
    // Where docs/runbook.md is served instead, e.g.
    // 'https://git.example.com/ops/diskprobe_exporter/blob/main/docs/runbook.md': each alert's
    // runbook_url is then this + '#' + its lower-cased name (its queries unfilled).
    runbookURLBase: '',

    // Dashboards.
    dashboardTags: ['diskprobe', 'storage'],
    dashboardRefresh: '1m',
    dashboardUIDPrefix: 'diskprobe-',
    dashboardTitlePrefix: 'diskprobe / ',
    // Regex restricting the data sources the `datasource` variable offers ('' for every
    // Prometheus data source).
    datasourceRegex: '',
  },
}
