// Disks near the limits they are sold with, and throttled at them (rules/headroom.libsonnet).
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local alert(name, rule) = { alert: name } + rule + { annotations+: s.runbook(name) };
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
          description: "{{ if $labels.device }}The workload on {{ $labels.device }} has used %(pct)s or more of the disk's {{ $labels.limit }} limit ({{ $labels.source }}){{ else }}Together, the disks under the node's ceiling have used %(pct)s or more of its {{ $labels.limit }} limit{{ end }} for %(for)s, {{ $value | humanizePercentage }} now; beyond it the platform queues I/O." % {
            pct: '%g%%' % (c.headroomNearLimitShare * 100),
            'for': c.headroomNearLimitFor,
          },
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
          description: '{{ $labels.device }} has been at %(pct)s or more of a limit for %(for)s with its gentle probe\'s p99 latency more than %(ratio)g times its level at under half load: the platform is queueing its I/O.' % {
            pct: '%g%%' % (c.headroomNearLimitShare * 100),
            'for': c.headroomThrottledFor,
            ratio: c.headroomThrottledRatio,
          },
        },
      }),
    ],
  }]
