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

    // Alert thresholds (docs/runbook.md explains each).
    latencyRegressionRatio: 2.5,  // median p99 of recent runs against the 7-day baseline
    latencyRegressionMinDeltaSeconds: 0.0001,  // ... and at least this much above it
    iopsDropRatio: 0.5,  // median IOPS of recent runs under this share of the baseline
    throughputDropRatio: 0.5,  // the same for throughput
    syncLatencyP99Seconds: 0.01,  // p99 of a durability profile's syncs (etcd's 10 ms)
    probeFailingShare: 0.25,  // share of failed runs in the last hour
    probeFailingMinRuns: 3,  // ... and at least this many failed runs
    probeStaleIntervals: 3,  // no finished run for this many probe intervals
    diskSaturationQueue: 10,  // average queue size (aqu-sz) of a disk

    // Headroom: disks against the limits they are sold with (rules/headroom.libsonnet).
    headroomNearLimitShare: 0.9,  // a disk at this share of a limit is near it
    headroomNearLimitFor: '15m',  // ... for this long: DiskprobeNearLimit
    headroomThrottledFor: '10m',  // near a limit with the latency signature this long: DiskprobeThrottled
    headroomThrottledRatio: 3,  // the signature: gentle p99 above this many times its calm level
    headroomThrottledMinDeltaSeconds: 0.0005,  // ... and at least this much above it
    headroomCalmShare: 0.5,  // the calm level is the gentle p99 under this share of every limit
    headroomRunsInterval: '5m',  // how often completed capacity runs are sampled (interval and offset)
    // Devices left out of the workload: volumes, whose I/O counts again on the disks under them.
    headroomVolumeDevices: 'dm-[0-9]+|md[0-9].*',

    // Where docs/runbook.md is served, e.g.
    // 'https://git.example.com/ops/diskprobe_exporter/blob/main/docs/runbook.md': each alert's
    // runbook_url is this + '#' + its lower-cased name. '' renders no runbook_url.
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
