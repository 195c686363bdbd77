// Whether the probes run at all, and the disks and agents under them.
function(c) [
  {
    name: 'diskprobe.alerts',
    rules: [
      {
        alert: 'DiskprobeProbeFailing',
        // More than a quarter of the runs of the last hour failed (error or timeout), and at
        // least 3 of them: a share, whatever the probe interval. A vanished target and failed
        // I/Os have their own alerts.
        expr: |||
          (
            sum without (result) (increase(diskprobe_probe_runs_total{result=~"error|timeout"}[1h]))
              / sum without (result) (increase(diskprobe_probe_runs_total{result=~"success|error|timeout"}[1h]))
              > 0.25
          )
          and sum without (result) (increase(diskprobe_probe_runs_total{result=~"error|timeout"}[1h])) >= 3
          unless on (job, instance, target)
            (diskprobe_target_info{device!=""} unless on (job, instance, device) diskprobe_disk_info)
          unless on (job, instance, target, profile)
            (changes(diskprobe_io_errors_total[1h]) >= 2 and increase(diskprobe_io_errors_total[1h]) >= 2)
        |||,
        'for': '10m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk probe failing on {{ $labels.instance }} {{ $labels.target }}',
          description: "{{ $value | humanizePercentage }} of the runs of profile {{ $labels.profile }} on {{ $labels.target }} failed or timed out in the last hour; the agent's log says why.",
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobeprobefailing',
        },
      },
      {
        alert: 'DiskprobeIOErrors',
        // Probe I/Os failed in at least two runs within the last hour (one transient error does
        // not page; a counter reset at restart is not an error).
        expr: |||
          changes(diskprobe_io_errors_total[1h]) >= 2
            and increase(diskprobe_io_errors_total[1h]) >= 2
        |||,
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk I/O errors on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: 'Probe I/Os of profile {{ $labels.profile }} on {{ $labels.target }} failed in several runs within the last hour.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobeioerrors',
        },
      },
      {
        alert: 'DiskprobeTargetVanished',
        // The block device under a target is gone from /proc/diskstats (a disk that fell off the
        // bus), while the agent's diskstats collector works.
        expr: |||
          diskprobe_target_info{device!=""}
            unless on (job, instance, device) diskprobe_disk_info
            and on (job, instance) diskprobe_scrape_collector_success{collector="diskstats"} == 1
        |||,
        'for': '5m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk under probe target vanished on {{ $labels.instance }} {{ $labels.target }} ({{ $labels.device }})',
          description: '{{ $labels.device }}, the device under target {{ $labels.target }} ({{ $labels.path }}), is no longer in /proc/diskstats.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobetargetvanished',
        },
      },
      {
        alert: 'DiskprobeProbeStale',
        // No finished run for three intervals: runs are skipped (busy device, budget) or hang.
        expr: |||
          (time() - diskprobe_probe_last_run_timestamp_seconds)
            / on (job, instance, target) group_left
              max by (job, instance, target) (diskprobe_target_interval_seconds)
            > 3
        |||,
        'for': '10m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk probe stale on {{ $labels.instance }} {{ $labels.target }}',
          description: 'Profile {{ $labels.profile }} on {{ $labels.target }} has not finished a run for {{ $value | printf "%.1f" }} intervals.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobeprobestale',
        },
      },
      {
        alert: 'DiskprobeProbeAbsent',
        // A configured target that has never finished a run.
        expr: |||
          diskprobe_target_info unless on (job, instance, target) diskprobe_probe_last_run_timestamp_seconds
        |||,
        'for': '30m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk probe never ran on {{ $labels.instance }} {{ $labels.target }}',
          description: 'Target {{ $labels.target }} ({{ $labels.path }}) is configured but no run has finished in 30 minutes.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobeprobeabsent',
        },
      },
      {
        alert: 'DiskprobeExporterDown',
        expr: 'up{job="diskprobe"} == 0',
        'for': '5m',
        labels: { severity: 'warning' },
        annotations: {
          summary: 'diskprobe_exporter down on {{ $labels.instance }}',
          description: 'Prometheus cannot scrape diskprobe_exporter on {{ $labels.instance }}.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobeexporterdown',
        },
      },
      {
        alert: 'DiskprobeDiskSaturated',
        // The node-mixin's saturation signal: average queue size (aqu-sz) above 10 for 30
        // minutes. Utilisation says nothing on SSD and NVMe, which serve many I/Os in parallel.
        expr: 'rate(diskprobe_disk_io_time_weighted_seconds_total[5m]) > 10',
        'for': '30m',
        labels: { severity: 'info' },
        annotations: {
          summary: 'Disk {{ $labels.device }} saturated on {{ $labels.instance }}',
          description: 'The I/O queue of {{ $labels.device }} has averaged {{ $value | printf "%.1f" }} requests for 30 minutes.',
          runbook_url: 'https://github.com/example/diskprobe_exporter/blob/main/docs/runbook.md#diskprobedisksaturated',
        },
      },
    ],
  },
]
