// Whether the probes run at all, and the disks and agents under them.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local alert(name, rule) = { alert: name } + rule + { annotations+: s.runbook(name) };
  local runs(results) = 'sum without (result) (increase(%s[1h]))'
                        % s.sel('diskprobe_probe_runs_total', ['result=~"%s"' % results]);
  local ioErrors = |||
    changes(%s[1h]) >= 2
      and increase(%s[1h]) >= 2
  ||| % [s.sel('diskprobe_io_errors_total'), s.sel('diskprobe_io_errors_total')];
  // The block device under a target is gone from /proc/diskstats.
  local vanished = '%s unless on (%s) %s' % [
    s.sel('diskprobe_target_info', ['device!=""']),
    s.by(['job', 'instance', 'device']),
    s.sel('diskprobe_disk_info'),
  ];
  [{
    name: 'diskprobe.alerts',
    rules: [
      // More than a quarter of the runs of the last hour failed (error or timeout), and at
      // least 3 of them: a share, whatever the probe interval. A vanished target and failed
      // I/Os have their own alerts.
      alert('DiskprobeProbeFailing', {
        expr: |||
          (
            %(failed)s
              / %(finished)s
              > %(share)s
          )
          and %(failed)s >= %(min)s
          unless on (%(target)s)
            (%(vanished)s)
          unless on (%(pair)s)
            (%(ioErrors)s)
        ||| % {
          failed: runs('error|timeout'),
          finished: runs('success|error|timeout'),
          share: c.probeFailingShare,
          min: c.probeFailingMinRuns,
          target: s.by(['job', 'instance', 'target']),
          vanished: vanished,
          pair: s.by(['job', 'instance', 'target', 'profile']),
          ioErrors: std.strReplace(std.rstripChars(ioErrors, '\n'), '\n  ', ' '),
        },
        'for': '10m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk probe failing on {{ $labels.instance }} {{ $labels.target }}',
          description: "{{ $value | humanizePercentage }} of the runs of profile {{ $labels.profile }} on {{ $labels.target }} failed or timed out in the last hour; the agent's log says why.",
        },
      }),
      // Probe I/Os failed in at least two runs within the last hour (one transient error does
      // not page; a counter reset at restart is not an error).
      alert('DiskprobeIOErrors', {
        expr: ioErrors,
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk I/O errors on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'Probe I/Os of profile {{ $labels.profile }} on {{ $labels.target }} failed in several runs within the last hour.',
        },
      }),
      // The block device under a target is gone from /proc/diskstats (a disk that fell off the
      // bus), while the agent's diskstats collector works.
      alert('DiskprobeTargetVanished', {
        expr: |||
          %s
            unless on (%s) %s
            and on (%s) %s == 1
        ||| % [
          s.sel('diskprobe_target_info', ['device!=""']),
          s.by(['job', 'instance', 'device']),
          s.sel('diskprobe_disk_info'),
          s.by(['job', 'instance']),
          s.sel('diskprobe_scrape_collector_success', ['collector="diskstats"']),
        ],
        'for': '5m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk under probe target vanished on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: '{{ $labels.device }}, the device under target {{ $labels.target }} ({{ $labels.path }}), is no longer in /proc/diskstats.',
        },
      }),
      // No finished run for three intervals: runs are skipped (busy device, budget) or hang.
      alert('DiskprobeProbeStale', {
        expr: |||
          (time() - %s)
            / on (%s) group_left
              max by (%s) (%s)
            > %s
        ||| % [
          s.sel('diskprobe_probe_last_run_timestamp_seconds'),
          s.by(['job', 'instance', 'target']),
          s.by(['job', 'instance', 'target']),
          s.sel('diskprobe_target_interval_seconds'),
          c.probeStaleIntervals,
        ],
        'for': '10m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk probe stale on {{ $labels.instance }} {{ $labels.target }}',
          description: 'Profile {{ $labels.profile }} on {{ $labels.target }} has not finished a run for {{ $value | printf "%.1f" }} intervals.',
        },
      }),
      // A configured target that has never finished a run.
      alert('DiskprobeProbeAbsent', {
        expr: |||
          %s unless on (%s) %s
        ||| % [
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
          description: 'Prometheus cannot scrape diskprobe_exporter on {{ $labels.instance }}.',
        },
      }),
      // The node-mixin's saturation signal: average queue size (aqu-sz) above 10 for 30
      // minutes. Utilisation says nothing on SSD and NVMe, which serve many I/Os in parallel.
      alert('DiskprobeDiskSaturated', {
        expr: 'rate(%s[5m]) > %s' % [
          s.sel('diskprobe_disk_io_time_weighted_seconds_total'),
          c.diskSaturationQueue,
        ],
        'for': '30m',
        labels: { severity: 'info' },
        annotations: {
          summary: 'Disk {{ $labels.device }} saturated on {{ $labels.instance }}',
          description: 'The I/O queue of {{ $labels.device }} has averaged {{ $value | printf "%.1f" }} requests for 30 minutes.',
        },
      }),
    ],
  }]
