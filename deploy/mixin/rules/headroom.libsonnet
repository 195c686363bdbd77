// Headroom: how close each disk is to the limits it is sold with (docs/rules-design.md, "Headroom").
// Every recorded series drops the labels that change with a rollout while the disk does not
// (pod, container, endpoint); joins use `ignoring` and `group_*` on the disk's labels, so that the
// cluster label and an agent scraped twice both carry through. Every join's "one" side is unique
// per match group by construction (docs/rules-design.md, "Joins"): an aggregation `without` every
// label the join ignores (labels the series do not have included, so that the guard is written
// where it holds), or `topk without (...) (1, ...)` where the join copies labels from it. A kernel
// name that moved to another disk puts two serials on one device for as long as a window looks
// back, and a join that found both would fail for the whole fleet.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local volatile = 'pod, container, endpoint';
  local disks(metric) = s.sel(metric, ['device!~"%s"' % c.headroomVolumeDevices]);
  local stable(metric) = 'max without (%s) (%s)' % [volatile, s.sel(metric)];
  // What the workload (everything but the probes) does on each whole disk, per second: two
  // diskstats counters minus the probes' counter, put on the disks under each target.
  local workload(first, second, probe) = |||
    max without (%(volatile)s) (
      clamp_min(
        rate(%(first)s[4m]) + rate(%(second)s[4m])
          - (
            sum without (target, serial, wwn, volume_id) (
              sum without (profile, device, serial, wwn, volume_id) (rate(%(probe)s[4m]))
                * ignoring (device, serial, wwn, volume_id) group_right %(targetDisk)s
            )
            or 0 * %(ioNow)s
          ),
        0
      )
    )
  ||| % {
    volatile: volatile,
    first: disks(first),
    second: disks(second),
    probe: s.sel(probe),
    targetDisk: s.sel('diskprobe_target_disk_info'),
    ioNow: disks('diskprobe_disk_io_now'),
  };
  // A disk's limit: the declared one where there is one, else the one its capacity runs measured
  // over the last day for the disk that has the kernel name now (its serial and wwn under a
  // target); the larger where a window holds two.
  local share(kind, quantity, limit) = {
    record: 'diskprobe:disk_limit_consumed:ratio_rate4m',
    labels: { limit: kind },
    expr: |||
      %(workload)s
        / ignoring (serial, wwn, source) group_left (serial, wwn, source)
          topk without (serial, wwn, source) (1,
            %(declared)s
              or ignoring (source)
            (
              last_over_time(%(measured)s[2h])
                and on (%(diskId)s) %(current)s
            )
          )
    ||| % {
      workload: s.sel('diskprobe:disk_workload_%s:rate4m' % quantity),
      declared: stable('diskprobe_disk_limit_%s' % limit),
      measured: s.sel('diskprobe:disk_limit_%s:probe' % limit),
      diskId: s.by(['job', 'instance', 'device', 'serial', 'wwn']),
      current: s.sel('diskprobe_target_disk_info'),
    },
  };
  local nodeShare(kind, quantity, limit) = {
    record: 'diskprobe:node_limit_consumed:ratio_rate4m',
    labels: { limit: kind },
    expr: |||
      sum without (device) (
        %(workload)s
          and ignoring (serial, wwn) %(members)s
      )
        / ignoring (source) group_left (source) topk without (source) (1, %(limit)s)
    ||| % {
      workload: s.sel('diskprobe:disk_workload_%s:rate4m' % quantity),
      members: s.sel('diskprobe_node_limit_device_info'),
      limit: stable('diskprobe_node_limit_%s' % limit),
    },
  };
  // The last run of each capacity profile of `class` that completed since the last evaluation
  // of its group (whose interval is the offset).
  local completed(gauge, blockSize) = |||
    max without (%(volatile)s) (
      %(gauge)s
        and on (%(pair)s)
          (%(runs)s - %(runs)s offset %(interval)s > 0)
        and on (%(pair)s)
          %(capacity)s
    )
  ||| % {
    volatile: volatile,
    gauge: s.sel(gauge),
    pair: s.by(['job', 'instance', 'target', 'profile']),
    runs: s.sel('diskprobe_probe_runs_total', ['result="success"']),
    interval: c.headroomRunsInterval,
    capacity: s.sel('diskprobe_profile_info', ['block_size=~"%s"' % blockSize, 'iodepth!="1"', 'rate_iops="0"']),
  };
  local measured(limit, completed) = {
    record: 'diskprobe:disk_limit_%s:probe' % limit,
    labels: { source: 'probe' },
    expr: |||
      max without (target, volume_id) (
        max without (profile, device, serial, wwn, volume_id) (quantile_over_time(0.5, %s[1d]))
          * ignoring (device, serial, wwn, volume_id) group_right %s
      )
    ||| % [s.sel(completed), stable('diskprobe_target_disk_info')],
  };
  [
    {
      name: 'diskprobe.headroom',
      rules: [
        {
          record: 'diskprobe:disk_workload_iops:rate4m',
          expr: workload('diskprobe_disk_reads_completed_total', 'diskprobe_disk_writes_completed_total', 'diskprobe_ios_total'),
        },
        {
          record: 'diskprobe:disk_workload_bytes:rate4m',
          expr: workload('diskprobe_disk_read_bytes_total', 'diskprobe_disk_written_bytes_total', 'diskprobe_io_bytes_total'),
        },
      ],
    },
    {
      name: 'diskprobe.headroom.runs',
      interval: c.headroomRunsInterval,
      rules: [
        { record: 'diskprobe:probe_iops:completed', expr: completed('diskprobe_probe_iops', '[0-9]{1,5}') },
        { record: 'diskprobe:probe_throughput_bytes_per_second:completed', expr: completed('diskprobe_probe_throughput_bytes_per_second', '[0-9]{6,}') },
      ],
    },
    {
      name: 'diskprobe.headroom.limits',
      interval: '1h',
      rules: [
        measured('iops', 'diskprobe:probe_iops:completed'),
        measured('bytes_per_second', 'diskprobe:probe_throughput_bytes_per_second:completed'),
      ],
    },
    {
      name: 'diskprobe.headroom.share',
      rules: [
        share('iops', 'iops', 'iops'),
        share('throughput', 'bytes', 'bytes_per_second'),
        nodeShare('iops', 'iops', 'iops'),
        nodeShare('throughput', 'bytes', 'bytes_per_second'),
      ],
    },
    {
      name: 'diskprobe.headroom.pressure',
      rules: [
        // The pressure on a disk's caps: its largest share of a limit it is sold with (declared:
        // not one its capacity runs measured, which a workload of other request sizes or another
        // pattern can exceed without any cap in the way), or of the node's ceiling it is under.
        // The throttling signature and the calm level read it.
        {
          record: 'diskprobe:disk_limit_consumed:max_ratio_rate4m',
          expr: |||
            max without (limit, source) (
              %s
              or
                max without (limit, source, device, serial, wwn) (%s)
                  * ignoring (device, serial, wwn) group_right %s
            )
          ||| % [
            s.sel('diskprobe:disk_limit_consumed:ratio_rate4m', ['source!="probe"']),
            s.sel('diskprobe:node_limit_consumed:ratio_rate4m'),
            stable('diskprobe_node_limit_device_info'),
          ],
        },
      ],
    },
    {
      name: 'diskprobe.headroom.calm_samples',
      interval: c.headroomRunsInterval,
      rules: [
        {
          record: 'diskprobe:probe_latency_p99:calm',
          expr: |||
            max without (stat, device, %(volatile)s) (
              %(p99)s
                and on (%(pair)s) %(gentle)s
                and on (%(target)s)
                  (
                    %(targetDisk)s
                      and on (%(disk)s) (%(pressure)s < %(calm)s)
                  )
            )
          ||| % {
            volatile: volatile,
            p99: s.sel('diskprobe_probe_latency_seconds', ['stat="p99"']),
            pair: s.by(['job', 'instance', 'target', 'profile']),
            gentle: s.sel('diskprobe_profile_info', ['rate_iops!="0"']),
            target: s.by(['job', 'instance', 'target']),
            targetDisk: s.sel('diskprobe_target_disk_info'),
            disk: s.by(['job', 'instance', 'device']),
            pressure: s.sel('diskprobe:disk_limit_consumed:max_ratio_rate4m'),
            calm: c.headroomCalmShare,
          },
        },
      ],
    },
    {
      name: 'diskprobe.headroom.hourly',
      interval: '1h',
      rules: [
        {
          record: 'diskprobe:probe_latency_p99:calm_median_1h',
          expr: 'quantile_over_time(0.5, %s[1h])' % s.sel('diskprobe:probe_latency_p99:calm'),
        },
      ],
    },
    {
      name: 'diskprobe.headroom.daily',
      interval: '1h',
      rules: [
        {
          record: 'diskprobe:probe_latency_p99:calm_median_1d',
          expr: 'quantile_over_time(0.5, %s[1d])' % s.sel('diskprobe:probe_latency_p99:calm_median_1h'),
        },
      ],
    },
    {
      name: 'diskprobe.headroom.calm',
      interval: '1h',
      rules: [
        {
          record: 'diskprobe:probe_latency_p99:throttled_above',
          expr: |||
            %(calm)s
              + clamp_min((%(ratio)s - 1) * %(calm)s, %(delta)s)
          ||| % {
            calm: 'last_over_time(%s[2h])' % s.sel('diskprobe:probe_latency_p99:calm_median_1d'),
            ratio: c.headroomThrottledRatio,
            delta: c.headroomThrottledMinDeltaSeconds,
          },
        },
      ],
    },
    {
      name: 'diskprobe.headroom.throttled',
      rules: [
        {
          record: 'diskprobe:disk_throttled:bool',
          expr: |||
            max without (target, volume_id) (
              max without (profile, device, serial, wwn, volume_id) (
                max without (stat, device, %(volatile)s) (%(p99)s)
                  > bool last_over_time(%(above)s[2h])
              )
                * ignoring (device, serial, wwn, volume_id) group_right %(targetDisk)s
            )
              * (%(pressure)s >= bool %(near)s)
          ||| % {
            volatile: volatile,
            p99: s.sel('diskprobe_probe_latency_seconds', ['stat="p99"']),
            above: s.sel('diskprobe:probe_latency_p99:throttled_above'),
            targetDisk: stable('diskprobe_target_disk_info'),
            pressure: s.sel('diskprobe:disk_limit_consumed:max_ratio_rate4m'),
            near: c.headroomNearLimitShare,
          },
        },
      ],
    },
  ]
