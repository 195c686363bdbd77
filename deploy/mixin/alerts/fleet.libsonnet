// Fleet alerts: a disk slower than its peers, a cohort slower together, a disk lost
// (rules/fleet.libsonnet records what they read; docs/rules-design.md explains the design).
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local alert(name, rule) = { alert: name } + rule + { annotations+: s.runbook(name) };
  local target = s.by(['job', 'instance', 'target']);
  local cohortLabels = [c.cohortLabel] + c.cohortDiskLabels;
  local read(record, window) = 'last_over_time(%s[%s])' % [s.sel(record), window];
  local ratioMedian = read('diskprobe:probe_latency_p99:peer_ratio_median_12h', '1h');
  local ratioP80 = read('diskprobe:probe_latency_p99:peer_ratio_p80_12h', '1h');
  // How a cohort is named in an annotation: its `cohortLabel`, else its first disk label.
  local cohortName = '{{ if $labels.%s }}{{ $labels.%s }}{{ else }}{{ $labels.%s }}{{ end }}'
                     % [c.cohortLabel, c.cohortLabel, c.cohortDiskLabels[0]];
  // An annotation's query `expr` (with %s where the matchers `var` go): its first value
  // through `fn`.
  // A window in words: 12h is "12 hours".
  local words(w) = if std.endsWith(w, 'h') then '%s hours' % std.substr(w, 0, std.length(w) - 1) else w;
  local value(expr, var, fn) =
    '{{ with printf "%s" $%s | query }}{{ . | first | value | %s }}{{ end }}' % [expr, var, fn];
  [{
    name: 'diskprobe.fleet.alerts',
    interval: '5m',
    rules: [
      // Over `peerWindow`, the median of a disk's p99 samples divided by its cohort's median at
      // the same moments is at least 1.6 (steady, drifting, born slow: a disk 2x its peers has a
      // median ratio of 1.8 or more once its window is past the onset), or a fifth of them are 2 and
      // stand out from its own typical sample by 1.6x (slow runs much more often than its
      // peers'), and that is an outlier in its cohort (modified z-score above 2), unless the
      // disk's own workload is 3x its cohort's median in a fifth of the samples. The value is
      // the ratio.
      alert('DiskprobeSlowerThanPeers', {
        expr: |||
          (
            (
              %(median)s >= %(ratio)s
                and %(scoreMedian)s > %(score)s
            )
            or
            (
              %(p80)s >= %(intermittentRatio)s
                and %(p80)s
                  >= %(spread)s * %(median)s
                and %(scoreP80)s > %(score)s
            )
          )
          unless on (%(target)s) %(busy)s >= %(busyRatio)s
        ||| % {
          median: ratioMedian,
          p80: ratioP80,
          scoreMedian: read('diskprobe:probe_latency_p99:peer_score_median_12h', '1h'),
          scoreP80: read('diskprobe:probe_latency_p99:peer_score_p80_12h', '1h'),
          ratio: c.peerRatio,
          intermittentRatio: c.peerIntermittentRatio,
          spread: '%g' % c.peerIntermittentSpread,
          score: c.peerScore,
          target: target,
          busy: read('diskprobe:target_disk_ios:peer_ratio_p80_12h', '1h'),
          busyRatio: c.peerBusyRatio,
        },
        'for': c.peerFor,
        keep_firing_for: c.peerKeepFiringFor,
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk slower than its peers: {{ $labels.instance }} {{ $labels.target }}',
          description: std.join(' ', [
            s.matchers('sel', ['job', 'instance', 'target', 'profile']),
            s.matchers('cohort', ['job'] + cohortLabels + ['profile']),
            s.matchers('target', ['job', 'instance', 'target']),
            'Over the last %s the runs of profile {{ $labels.profile }} on {{ $labels.target }}' % words(c.peerWindow),
            '{{ with printf "diskprobe_target_info{%s}" $target | query }}{{ with first . }}(now {{ .Labels.device }}) {{ end }}{{ end -}}',
            'had a median p99 of',
            value('quantile_over_time(0.5, diskprobe:probe_latency_p99:last{%%s}[%s])' % c.peerWindow, 'sel', 'humanizeDuration'),
            'against ' + value('quantile_over_time(0.5, diskprobe_cohort:probe_latency_p99:median{%%s}[%s])' % c.peerWindow, 'cohort', 'humanizeDuration'),
            'for the disks of its cohort (%s);' % cohortName,
            'sample by sample its p99 was',
            value('last_over_time(diskprobe:probe_latency_p99:peer_ratio_median_12h{%s}[1h])', 'sel', 'printf "%.2f"') + "x its peers' median (%g or more fires)," % c.peerRatio,
            'and at least',
            value('last_over_time(diskprobe:probe_latency_p99:peer_ratio_p80_12h{%s}[1h])', 'sel', 'printf "%.2f"') + 'x in a fifth of its samples (%g or more, and %gx the median, fires);' % [c.peerIntermittentRatio, c.peerIntermittentSpread],
            'its modified z-score in the cohort is',
            value('last_over_time(diskprobe:probe_latency_p99:peer_score_median_12h{%s}[1h])', 'sel', 'printf "%.1f"'),
            '(typical sample) and',
            value('last_over_time(diskprobe:probe_latency_p99:peer_score_p80_12h{%s}[1h])', 'sel', 'printf "%.1f"'),
            '(slower fifth), against %g; the cohort has' % c.peerScore,
            '{{ with printf "count(diskprobe:probe_latency_p99:last_in_cohort{%s})" $cohort | query }}{{ . | first | value }}{{ end }}',
            'members with a last run.',
          ]),
        },
      }),
      // The fast path: over `peerFastWindow`, the median of a disk's p99 samples divided by its
      // cohort's median at the same moments is `peerFastRatio` or more (a disk several times
      // slower than its peers, named in minutes rather than the hours the 12-hour path needs),
      // unless its own workload is `peerBusyRatio` times its cohort's median over the same
      // window. A cohort-wide slowdown divides out. The value is the ratio.
      alert('DiskprobeFarSlowerThanPeers', {
        expr: |||
          quantile_over_time(0.5, %(ratio)s[%(window)s]) >= %(fast)s
            unless on (%(target)s) quantile_over_time(0.5, %(busy)s[%(window)s]) >= %(busyRatio)s
        ||| % {
          ratio: s.sel('diskprobe:probe_latency_p99:peer_ratio'),
          busy: s.sel('diskprobe:target_disk_ios:peer_ratio'),
          window: c.peerFastWindow,
          fast: c.peerFastRatio,
          target: target,
          busyRatio: c.peerBusyRatio,
        },
        'for': c.peerFastFor,
        labels: { severity: 'warning' },
        annotations: {
          summary: 'Disk far slower than its peers: {{ $labels.instance }} {{ $labels.target }}',
          description: std.join(' ', [
            s.matchers('sel', ['job', 'instance', 'target', 'profile']),
            s.matchers('cohort', ['job'] + cohortLabels + ['profile']),
            s.matchers('target', ['job', 'instance', 'target']),
            'Over the last %s the runs of profile {{ $labels.profile }} on {{ $labels.target }}' % c.peerFastWindow,
            '{{ with printf "diskprobe_target_info{%s}" $target | query }}{{ with first . }}(now {{ .Labels.device }}) {{ end }}{{ end -}}',
            'had a median p99 of',
            value('quantile_over_time(0.5, diskprobe:probe_latency_p99:last{%%s}[%s])' % c.peerFastWindow, 'sel', 'humanizeDuration'),
            'against ' + value('quantile_over_time(0.5, diskprobe_cohort:probe_latency_p99:median{%%s}[%s])' % c.peerFastWindow, 'cohort', 'humanizeDuration'),
            'for the disks of its cohort (%s);' % cohortName,
            'sample by sample its p99 was {{ $value | printf "%%.1f" }}x its peers\' median (%g or more pages); the cohort has' % c.peerFastRatio,
            '{{ with printf "count(diskprobe:probe_latency_p99:last_in_cohort{%s})" $cohort | query }}{{ . | first | value }}{{ end }}',
            'members with a last run.',
          ]),
        },
      }),
      // A whole cohort is slow: its median p99 over 6 hours is 2x its baseline (its best daily
      // median of the last 7 days). A backup window or a noisy neighbour on every disk of a
      // model, a storage backend, a firmware or kernel change: not one disk's fault, so `info`.
      alert('DiskprobeCohortSlowdown', {
        expr: |||
          %s
            / %s
            >= %s
        ||| % [
          read('diskprobe_cohort:probe_latency_p99:median_6h', '1h'),
          read('diskprobe_cohort:probe_latency_p99:baseline_7d', '2h'),
          c.cohortSlowdownRatio,
        ],
        'for': '1h',
        labels: { severity: 'info' },
        annotations: {
          summary: 'Disks of cohort %s are slower together' % cohortName,
          description: std.join(' ', [
            s.matchers('cohort', ['job'] + cohortLabels + ['profile']),
            "The median p99 of profile {{ $labels.profile }} over the cohort's disks has been",
            value('last_over_time(diskprobe_cohort:probe_latency_p99:median_6h{%s}[1h])', 'cohort', 'humanizeDuration'),
            'over the last 6 hours, {{ $value | printf "%%.2f" }}x its baseline (%g or more fire) of' % c.cohortSlowdownRatio,
            value('last_over_time(diskprobe_cohort:probe_latency_p99:baseline_7d{%s}[2h])', 'cohort', 'humanizeDuration') + ';',
            'each of its disks is compared with the others at the same moments, so none of them is paged for it.',
          ]),
        },
      }),
      // A disk that a block-device discovery rule was probing has vanished (the agent keeps it
      // as lost, across its restarts, for the rule's lost_retention) and is not alive on any
      // instance of the cluster: none of its identities (the cloud's volume id, its serial, its
      // WWN) is in any node's diskprobe_disk_info. A volume that moved to another node is alive
      // there; a serial that many disks share (an overlay's) is alive somewhere and names no
      // disk; a lost disk with no identity at all does not page. A disk retired on purpose
      // ([retired] disks) leaves the agent's lost series at the reload that lists it: this ends
      // within 10 minutes (goneKeepFiringFor).
      alert('DiskprobeDiskLost', {
        expr: |||
          max without (%(volatile)s) (
            %(lostVolume)s or %(lostSerial)s or %(lostWWN)s
          )
            unless on (%(byVolume)s) %(aliveVolume)s
            unless on (%(bySerial)s) %(aliveSerial)s
            unless on (%(byWWN)s) %(aliveWWN)s
        ||| % {
          volatile: std.join(', ', c.volatileLabels),
          lostVolume: s.sel('diskprobe_discovered_target_lost_timestamp_seconds', ['volume_id!=""']),
          lostSerial: s.sel('diskprobe_discovered_target_lost_timestamp_seconds', ['serial!=""']),
          lostWWN: s.sel('diskprobe_discovered_target_lost_timestamp_seconds', ['wwn!=""']),
          byVolume: s.by(['job', 'volume_id']),
          bySerial: s.by(['job', 'serial']),
          byWWN: s.by(['job', 'wwn']),
          aliveVolume: s.sel('diskprobe_disk_info', ['volume_id!=""']),
          aliveSerial: s.sel('diskprobe_disk_info', ['serial!=""']),
          aliveWWN: s.sel('diskprobe_disk_info', ['wwn!=""']),
        },
        'for': c.diskLostFor,
        keep_firing_for: c.goneKeepFiringFor,
        labels: { severity: 'critical' },
        annotations: {
          summary: 'Disk lost on {{ $labels.instance }}: {{ $labels.target }}',
          description: 'The disk probed as target {{ $labels.target }} by discovery rule {{ $labels.rule }} (model {{ $labels.model }}, serial {{ $labels.serial }}, last seen as {{ $labels.device }}) has been gone since {{ $value | humanizeTimestamp }}, and no node of the cluster has had a disk of that identity for %s.' % c.diskLostFor,
        },
      }),
    ],
  }]
