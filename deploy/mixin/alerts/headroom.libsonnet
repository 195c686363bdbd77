// Disks near the limits they are sold with, and throttled at them (rules/headroom.libsonnet).
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local alert(name, rule) = { alert: name } + rule + { annotations+: s.runbook(name) };
  // " (W of a limit of L)" for DiskprobeNearLimit: the workload (`quantity`: iops or bytes) of
  // the alert's disk, or of the disks under the node's ceiling, and the limit it was divided by.
  local figures(quantity, fn, unit) =
    local workload = 'diskprobe:disk_workload_%s:rate4m' % quantity;
    local ceiling = 'diskprobe_node_limit_%s' % (if quantity == 'iops' then 'iops' else 'bytes_per_second');
    local show(query, var) = '{{ with printf "%s" %s | query }}{{ . | first | value | %s }}%s{{ end }}' % [query, var, fn, unit];
    '{{ if $labels.device }} (%s of a limit of %s){{ else }} (%s of a limit of %s){{ end }}' % [
      show('max(%s{%%s})' % workload, '$disk'),
      show('max(%s{%%s}) / max(diskprobe:disk_limit_consumed:ratio_rate4m{%%s, limit=\\"%s\\"})' % [workload, if quantity == 'iops' then 'iops' else 'throughput'], '$disk $disk'),
      show('sum(%s{%%s} and on (%s) diskprobe_node_limit_device_info{%%s})' % [workload, s.by(['job', 'instance', 'device'])], '$node $node'),
      show('max(%s{%%s})' % ceiling, '$node'),
    ];
  // " (p99 P now, C when calm)" for DiskprobeThrottled: the largest gentle p99 of the targets on
  // the alert's disk (`var`: its matchers, by device or by serial) and their calm level; each
  // figure only where it has a value.
  local throttledFigures(var) =
    local targets = 'and on (%s) diskprobe_target_disk_info{%%s}' % s.by(['job', 'instance', 'target']);
    std.join('', [
      '{{ with printf "max(max without (stat, device, %s) (diskprobe_probe_latency_seconds{%%s, stat=\\"p99\\"}) %s and on (%s) diskprobe_profile_info{%%s, rate_iops!=\\"0\\"})" $node $%s $node | query }}' % [
        std.join(', ', c.volatileLabels),
        targets,
        s.by(['job', 'instance', 'target', 'profile']),
        var,
      ],
      " (gentle probe's p99 {{ . | first | value | humanizeDuration }} now",
      '{{ with printf "max(diskprobe:probe_latency_p99:calm_median_1d{%%s} %s)" $node $%s | query }}, {{ . | first | value | humanizeDuration }} when calm{{ end }})' % [targets, var],
      '{{ end }}',
    ]);
  [{
    name: 'diskprobe.alerts',
    rules: [
      // A disk's workload (its diskstats without the probes' own I/O) at this share or more of a
      // limit it is sold with (declared: a limit its capacity runs measured is not a cap, and a
      // workload of large or sequential requests exceeds it on a healthy disk), or the disks under
      // the node's ceiling ([limits]) at it together, for a while.
      alert('DiskprobeNearLimit', {
        expr: |||
          %(disk)s >= %(near)s
            or %(node)s >= %(near)s
        ||| % {
          disk: s.sel('diskprobe:disk_limit_consumed:ratio_rate4m', ['source!="probe"']),
          node: s.sel('diskprobe:node_limit_consumed:ratio_rate4m'),
          near: c.headroomNearLimitShare,
        },
        'for': c.headroomNearLimitFor,
        labels: { severity: 'warning' },
        annotations: {
          summary: "{{ if $labels.device }}Disk {{ $labels.device }} near its {{ $labels.limit }} limit{{ else }}Disks near the node's {{ $labels.limit }} limit{{ end }} on {{ $labels.instance }}",
          // With the absolute figures: the workload now and the limit (the workload over the
          // share, as the rule divided them), in I/Os or bytes per second.
          description: std.join('', [
            s.matchers('disk', ['job', 'instance', 'device']) + ' ',
            s.matchers('node', ['job', 'instance']) + ' ',
            '{{ if $labels.device }}The workload on {{ $labels.device }} has used %(pct)s or more of the disk\'s {{ $labels.limit }} limit ({{ $labels.source }}){{ else }}Together, the disks under the node\'s ceiling have used %(pct)s or more of its {{ $labels.limit }} limit{{ end }} for %(for)s, {{ $value | humanizePercentage }} now' % {
              pct: '%g%%' % (c.headroomNearLimitShare * 100),
              'for': c.headroomNearLimitFor,
            },
            '{{ if eq $labels.limit "iops" }}%s{{ else }}%s{{ end }}' % [figures('iops', 'humanize', ' I/Os per second'), figures('bytes', 'humanize1024', 'B/s')],
            '; beyond it the platform queues I/O.',
          ]),
        },
      }),
      // Where the cloud reports it (diskprobe:cloud_throttled:ratio_rate5m, EBS and instance
      // store), a volume that spent cloudThrottledShare of the last 5 minutes or more over its
      // own limit (scope="volume") or its instance's (scope="instance"), for a while; elsewhere a
      // disk at headroomNearLimitShare of a limit whose gentle probe's p99 is above its
      // throttled level (diskprobe:disk_throttled:bool). The cloud's series and the probes'
      // meet by serial (the kernel's serial on both), never by device.
      alert('DiskprobeThrottled', {
        expr: |||
          (
            %(probes)s == 1
              unless on (%(disk)s) %(cloud)s
          )
            or %(cloud)s >= %(share)s
        ||| % {
          probes: s.sel('diskprobe:disk_throttled:bool'),
          cloud: s.sel('diskprobe:cloud_throttled:ratio_rate5m'),
          disk: s.by(['job', 'instance', 'serial']),
          share: '%g' % c.cloudThrottledShare,
        },
        'for': c.headroomThrottledFor,
        labels: { severity: 'warning' },
        annotations: {
          summary: "Disk {{ $labels.device }} throttled{{ if eq $labels.scope \"volume\" }} at the volume's limit{{ else if eq $labels.scope \"instance\" }} at the instance's limit{{ end }} on {{ $labels.instance }}",
          // With the figures now, each only where it exists: the share of a limit (or of the
          // time over it, as the cloud counts it), the gentle probe's p99 and its calm level
          // (its p99 under half load, diskprobe:probe_latency_p99:calm_median_1d).
          description: std.join('', [
            s.matchers('disk', ['job', 'instance', 'device']) + ' ',
            s.matchers('vol', ['job', 'instance', 'serial']) + ' ',
            s.matchers('node', ['job', 'instance']) + ' ',
            '{{ if $labels.scope }}',
            '{{ $labels.device }}{{ with $labels.volume_id }} (volume {{ . }}){{ end }} spent {{ $value | humanizePercentage }} of the last 5 minutes over ',
            "{{ if eq $labels.scope \"volume\" }}the volume's provisioned IOPS or throughput{{ else }}the instance's {{ if $labels.volume_id }}EBS{{ else }}instance-store{{ end }} IOPS or throughput limit{{ end }}",
            ', %(pct)s or more for %(for)s, as the cloud reports it' % {
              pct: '%g%%' % (c.cloudThrottledShare * 100),
              'for': c.headroomThrottledFor,
            },
            throttledFigures('vol'),
            "{{ if eq $labels.scope \"volume\" }}: the volume's own limit queues its I/O.{{ else }}: the instance's limit over all its volumes queues the I/O.{{ end }}",
            '{{ else }}',
            '{{ $labels.device }} has been at %(pct)s or more of a limit for %(for)s' % {
              pct: '%g%%' % (c.headroomNearLimitShare * 100),
              'for': c.headroomThrottledFor,
            },
            '{{ with printf "max(diskprobe:disk_limit_consumed:max_ratio_rate4m{%s})" $disk | query }} ({{ . | first | value | humanizePercentage }} now){{ end }}',
            " and its gentle probe's p99 latency more than %g times its level at under half load" % c.headroomThrottledRatio,
            throttledFigures('disk'),
            ': the platform is queueing its I/O.',
            '{{ end }}',
          ]),
        },
      }),
    ],
  }]
