// Whether the probes run at all, and the disks and agents under them.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local alert(name, rule) = { alert: name } + rule + { annotations+: s.runbook(name) };
  local volatile = std.join(', ', c.volatileLabels);
  // The block device under a target is gone from /proc/diskstats.
  // (Only where the agent's diskstats collector works: a failing collector exports no
  // diskprobe_disk_info, and every device would look vanished.)
  local vanished = '%s unless on (%s) %s and on (%s) %s == 1' % [
    s.sel('diskprobe_target_info', ['device!=""']),
    s.by(['job', 'instance', 'device']),
    s.sel('diskprobe_disk_info'),
    s.by(['job', 'instance']),
    s.sel('diskprobe_scrape_collector_success', ['collector="diskstats"']),
  ];
  [{
    name: 'diskprobe.alerts',
    rules: [
      // At least 3 of the last 10 finished runs failed (error or timeout): a share of runs,
      // whatever the probe interval. A vanished target and failed I/Os have their own alerts.
      alert('DiskprobeProbeFailing', {
        expr: |||
          max without (%(volatile)s, device) (
            sum without (result) (%(failed)s)
          ) >= %(min)s
          unless on (%(target)s)
            (%(vanished)s)
          unless on (%(pair)s) %(ioErrors)s >= %(errors)s
        ||| % {
          volatile: volatile,
          failed: s.sel('diskprobe_probe_recent_runs', ['result=~"error|timeout"']),
          min: c.probeFailingRuns,
          target: s.by(['job', 'instance', 'target']),
          vanished: vanished,
          pair: s.by(['job', 'instance', 'target', 'profile']),
          ioErrors: s.sel('diskprobe_probe_recent_io_error_runs'),
          errors: c.ioErrorRuns,
        },
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk probe failing on {{ $labels.instance }} {{ $labels.target }}',
          description: "{{ $value }} of the last 10 runs of profile {{ $labels.profile }} on {{ $labels.target }} failed or timed out (%d or more fire); the agent's log says why." % c.probeFailingRuns,
        },
      }),
      // Probe I/Os failed in at least 2 of the last 10 finished runs (one transient error does
      // not page).
      alert('DiskprobeIOErrors', {
        expr: 'max without (%s, device) (%s) >= %s' % [volatile, s.sel('diskprobe_probe_recent_io_error_runs'), c.ioErrorRuns],
        keep_firing_for: c.criticalKeepFiringFor,
        labels: { severity: 'critical' },
        annotations: {
          summary: 'Disk I/O errors on {{ $labels.instance }} {{ $labels.target }}',
          // The disk: its kernel name, serial and volume id, as diskprobe_disk_info has them now.
          description: std.join(' ', [
            s.matchers('node', ['job', 'instance']),
            s.matchers('target', ['job', 'instance', 'target']),
            'Probe I/Os of profile {{ $labels.profile }} on {{ $labels.target }}',
            '{{- with printf "%s{%%s} and on (%s) %s{%%s}" $node $target | query }}{{ with first . }} on {{ .Labels.device }} ({{ if .Labels.serial }}serial {{ .Labels.serial }}{{ else }}no serial{{ end }}{{ if .Labels.volume_id }}, volume {{ .Labels.volume_id }}{{ end }}){{ end }}{{ end }}' % [
              'diskprobe_disk_info',
              s.by(['job', 'instance', 'device']),
              'diskprobe_target_info',
            ],
            'failed in {{ $value }} of its last 10 runs (%d or more page; it keeps firing for %s after).' % [c.ioErrorRuns, c.criticalKeepFiringFor],
          ]),
        },
      }),
      // The block device under a configured target is gone from /proc/diskstats (a disk that
      // fell off the bus), while the agent's diskstats collector works. The agent keeps a gone
      // device as the target's `device` across its restarts, until the disk returns or is
      // retired ([retired] disks); then this ends within 10 minutes (goneKeepFiringFor).
      alert('DiskprobeTargetVanished', {
        expr: |||
          max without (%s) (
            %s
          )
        ||| % [volatile, vanished],
        'for': '5m',
        keep_firing_for: c.goneKeepFiringFor,
        labels: { severity: 'critical' },
        annotations: {
          summary: 'Disk under probe target vanished on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: "{{ $labels.device }}, the device under target {{ $labels.target }} ({{ $labels.path }}), has been missing from /proc/diskstats for 5 minutes or more while the agent's diskstats collector works.",
        },
      }),
      // The kernel has held an I/O of a probe run for `ioHungSeconds`: the run gave up on it
      // (its timeout), no run starts on the device until it completes, and whatever else uses
      // the device waits too. A hung disk, or its path (a controller, a network volume's link).
      alert('DiskprobeIOHung', {
        expr: 'max without (%s) (%s) >= %s' % [volatile, s.sel('diskprobe_probe_stuck_io_age_seconds'), c.ioHungSeconds],
        keep_firing_for: c.criticalKeepFiringFor,
        labels: { severity: 'critical' },
        annotations: {
          summary: 'Disk I/O hung on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: '{{ $labels.device }}, under target {{ $labels.target }}, has held an I/O of a probe run of profile {{ $labels.profile }} for {{ $value | humanizeDuration }} (%g s or more page); no probe runs on it until the kernel completes it.' % c.ioHungSeconds,
        },
      }),
      // No finished run for 3.5 intervals: at least three cycles in a row (jitter is at most
      // 10%) were skipped (budget, a run in flight) or hang, at any probe interval. Not for a
      // profile whose latest skip was for a busy disk (`busy`, or a capacity run that yielded):
      // it is skipped by design while the workload needs the disk.
      alert('DiskprobeProbeStale', {
        expr: |||
          (time() - max without (%(volatile)s, device) (%(last)s))
            / on (%(target)s) group_left
              max by (%(target)s) (%(interval)s)
            > %(stale)s
          unless on (%(pair)s)
            (
              max by (%(pair)s) (%(busySkip)s)
                >= on (%(pair)s) max by (%(pair)s) (%(anySkip)s)
            )
        ||| % {
          volatile: volatile,
          last: s.sel('diskprobe_probe_last_run_timestamp_seconds'),
          target: s.by(['job', 'instance', 'target']),
          interval: s.sel('diskprobe_target_interval_seconds'),
          stale: c.probeStaleIntervals,
          pair: s.by(['job', 'instance', 'target', 'profile']),
          busySkip: s.sel('diskprobe_probe_last_skip_timestamp_seconds', ['reason=~"busy|yielded"']),
          anySkip: s.sel('diskprobe_probe_last_skip_timestamp_seconds'),
        },
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk probe stale on {{ $labels.instance }} {{ $labels.target }}',
          description: 'Profile {{ $labels.profile }} on {{ $labels.target }} has not finished a run for {{ $value | printf "%%.1f" }} intervals (more than %g fire).' % c.probeStaleIntervals,
        },
      }),
      // A configured target that has never finished a run.
      alert('DiskprobeProbeAbsent', {
        expr: |||
          max without (%s) (
            %s unless on (%s) %s
          )
        ||| % [
          volatile,
          s.sel('diskprobe_target_info'),
          s.by(['job', 'instance', 'target']),
          s.sel('diskprobe_probe_last_run_timestamp_seconds'),
        ],
        'for': '30m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk probe never ran on {{ $labels.instance }} {{ $labels.target }}',
          description: 'Target {{ $labels.target }} ({{ $labels.path }}) is configured but no run has finished in 30 minutes.',
        },
      }),
      alert('DiskprobeExporterDown', {
        expr: '%s == 0' % s.sel('up'),
        'for': '5m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'diskprobe_exporter down on {{ $labels.instance }}',
          description: 'Prometheus has not scraped diskprobe_exporter on {{ $labels.instance }} for 5 minutes or more (up {{ $value }}).',
        },
      }),
      // The node-mixin's saturation signal: average queue size (aqu-sz) above 10 for 30
      // minutes. Utilisation says nothing on SSD and NVMe, which serve many I/Os in parallel.
      alert('DiskprobeDiskSaturated', {
        expr: 'max without (%s) (rate(%s[5m])) > %s' % [
          volatile,
          s.sel('diskprobe_disk_io_time_weighted_seconds_total'),
          c.diskSaturationQueue,
        ],
        'for': '30m',
        labels: { severity: 'info' },
        annotations: {
          summary: 'Disk {{ $labels.device }} saturated on {{ $labels.instance }}',
          description: 'The I/O queue of {{ $labels.device }} has averaged {{ $value | printf "%%.1f" }} requests for 30 minutes (more than %g fire).' % c.diskSaturationQueue,
        },
      }),
    ],
  }]
