// Disks near the limits they are sold with, and throttled at them (rules/headroom.libsonnet).
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local alert(name, rule) = { alert: name } + rule + { annotations+: s.runbook(name) };
  // " (W of a limit of L)" for DiskprobeNearLimit: the workload (`quantity`: iops or bytes) of
  // the alert's disk, or of the disks under the node's ceiling, and the limit it was divided by.
  local figures(quantity, fn, unit) =
    local workload = 'diskprobe:disk_workload_%s:rate2m' % quantity;
    local ceiling = 'diskprobe_node_limit_%s' % (if quantity == 'iops' then 'iops' else 'bytes_per_second');
    local show(query, var) = '{{ with printf "%s" %s | query }}{{ . | first | value | %s }}%s{{ end }}' % [query, var, fn, unit];
    '{{ if $labels.device }} (%s of a limit of %s){{ else }} (%s of a limit of %s){{ end }}' % [
      show('max(%s{%%s})' % workload, '$disk'),
      show('max(%s{%%s}) / max(diskprobe:disk_limit_consumed:ratio_rate2m{%%s, limit=\\"%s\\"})' % [workload, if quantity == 'iops' then 'iops' else 'throughput'], '$disk $disk'),
      show('sum(%s{%%s} and on (%s) diskprobe_node_limit_device_info{%%s})' % [workload, s.by(['job', 'instance', 'device'])], '$node $node'),
      show('max(%s{%%s})' % ceiling, '$node'),
    ];
  [{
    name: 'diskprobe.alerts',
    rules: [
      // A disk's workload (its diskstats without the probes' own I/O) at this share or more of a
      // limit it is sold with (declared, else measured), or the disks under the node's ceiling
      // ([limits]) at it together, for a while.
      alert('DiskprobeNearLimit', {
        expr: |||
          %(disk)s >= %(near)s
            or %(node)s >= %(near)s
        ||| % {
          disk: s.sel('diskprobe:disk_limit_consumed:ratio_rate2m'),
          node: s.sel('diskprobe:node_limit_consumed:ratio_rate2m'),
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
      // A disk at that share of a limit whose gentle probe's p99 is above its throttled level
      // (diskprobe:disk_throttled:bool), for a while.
      alert('DiskprobeThrottled', {
        expr: '%s == 1' % s.sel('diskprobe:disk_throttled:bool'),
        'for': c.headroomThrottledFor,
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk {{ $labels.device }} throttled on {{ $labels.instance }}',
          // With the figures now: the largest share of a limit, and the gentle probe's p99.
          description: std.join('', [
            s.matchers('disk', ['job', 'instance', 'device']) + ' ',
            s.matchers('node', ['job', 'instance']) + ' ',
            '{{ $labels.device }} has been at %(pct)s or more of a limit for %(for)s' % {
              pct: '%g%%' % (c.headroomNearLimitShare * 100),
              'for': c.headroomThrottledFor,
            },
            '{{ with printf "max(diskprobe:disk_limit_consumed:max_ratio_rate2m{%s})" $disk | query }} ({{ . | first | value | humanizePercentage }} now){{ end }}',
            " with its gentle probe's p99 latency",
            '{{ with printf "max(max without (stat, device, %s) (diskprobe_probe_latency_seconds{%%s, stat=\\"p99\\"}) and on (%s) diskprobe_target_disk_info{%%s} and on (%s) diskprobe_profile_info{%%s, rate_iops!=\\"0\\"})" $node $disk $node | query }} ({{ . | first | value | humanizeDuration }} now){{ end }}' % [
              std.join(', ', c.volatileLabels),
              s.by(['job', 'instance', 'target']),
              s.by(['job', 'instance', 'target', 'profile']),
            ],
            ' more than %g times its level at under half load: the platform is queueing its I/O.' % c.headroomThrottledRatio,
          ]),
        },
      }),
    ],
  }]
