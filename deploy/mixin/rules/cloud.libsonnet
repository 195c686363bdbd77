// The cloud's own word (docs/rules-design.md, "The cloud's own word"): EC2's NVMe performance
// statistics of EBS volumes and instance-store devices (diskprobe_cloud_*, [cloud_stats]).
// Every recorded series keeps the disk's identity (device, serial, volume_id) and drops the
// labels that change with a rollout while the disk does not (pod, container, endpoint). Nothing
// here joins: DiskprobeThrottled (alerts/headroom.libsonnet) and the dashboards relate these
// series to the probes' by serial or volume_id, never by device.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local volatile = std.join(', ', c.volatileLabels);
  // The page's histograms have classic buckets only. Prometheus keeps them as classic series
  // (`_bucket`), or, where Prometheus 3 converts classic histograms
  // (`convert_classic_histograms_to_nhcb: true`, with `always_scrape_classic_histograms: false`
  // no `_bucket` series at all), as native histograms with custom buckets under the histogram's
  // own name: the native form where it exists, else the classic one. The native form takes the
  // quantile of each series and then the largest of a disk's (a disk scraped twice), so that it
  // never adds histograms whose bounds may differ.
  local quantile(q) = {
    record: 'diskprobe:cloud_io_latency_seconds:p%d_rate5m' % (q * 100),
    expr: |||
      max without (%(volatile)s) (histogram_quantile(%(q)g, rate(%(native)s[5m])))
        or
      histogram_quantile(%(q)g, max without (%(volatile)s) (rate(%(classic)s[5m])))
    ||| % {
      q: q,
      volatile: volatile,
      native: s.sel('diskprobe_cloud_io_latency_seconds'),
      classic: s.sel('diskprobe_cloud_io_latency_seconds_bucket'),
    },
  };
  [{
    name: 'diskprobe.cloud',
    rules: [
      // The share of the last 5 minutes each volume (scope="volume") or its instance
      // (scope="instance") spent over each limit (limit="iops", "throughput"), as the cloud
      // counts it: 0 under the limit, 1 when over it the whole time.
      {
        record: 'diskprobe:cloud_limit_exceeded:ratio_rate5m',
        expr: 'max without (%s) (rate(%s[5m]))' % [volatile, s.sel('diskprobe_cloud_limit_exceeded_seconds_total')],
      },
      // The throttling signal per scope: the larger of the IOPS and throughput shares.
      {
        record: 'diskprobe:cloud_throttled:ratio_rate5m',
        expr: 'max without (limit, %s) (rate(%s[5m]))' % [volatile, s.sel('diskprobe_cloud_limit_exceeded_seconds_total')],
      },
      // The cloud-side latency of reads and writes (op), from the page's histograms, classic
      // or NHCB.
      quantile(0.5),
      quantile(0.99),
    ],
  }]
