// "Fleet": each disk against its peers (docs/rules-design.md, "How the rules are built").
//
// No rule reads a series recorded in its own group (vmalert stores a group's results after the
// group, Prometheus and vmalert run groups apart): each stage is a group, read by the next
// through a window that holds its producer's last evaluation (docs/rules-design.md, "Stages").
//
// Every 5 minutes: diskprobe.fleet.sample reads the raw series once, by instant reads or [5m]
// windows: the last run's figures without the labels that change while the disk does not
// (`volatileLabels`, `device`), each target's cohort and the workload of the disk under each
// target; diskprobe.fleet.cohort gives those their cohort's labels; diskprobe.fleet.busy divides
// each disk's workload by its cohort's median, and diskprobe.fleet.busy_12h (every 30 minutes)
// takes the 80th percentile of that over `peerWindow`: a disk `peerBusyRatio` times busier than
// its cohort leaves the cohort's reference and is not scored against it. diskprobe.fleet.median
// takes each cohort's median p99 at that moment; diskprobe.fleet.ratio divides each sample of a
// p99 by it (what the cohort shares, a backup window, a noisy neighbour, a daily cycle, divides
// out).
//
// Every 30 minutes: diskprobe.fleet.score reads the ratios: the median and 80th percentile of
// each disk's ratios over `peerWindow`; diskprobe.fleet.cohort_score their cohort's median and
// median absolute deviation; diskprobe.fleet.peer_score how unusual each disk is in its cohort
// (the modified z-score).
//
// Every group reads only groups above it in this file, so that an evaluation of the groups in
// file order over a past range (vmalert's replay) computes what live evaluation does.
function(c)
  local s = (import '../lib/selectors.libsonnet')(c);
  local volatile = std.join(', ', c.volatileLabels);
  local target = s.by(['job', 'instance', 'target']);
  local pair = s.by(['job', 'instance', 'target', 'profile']);
  local cohortLabels = [c.cohortLabel] + c.cohortDiskLabels;
  // A cohort and a cohort's profile, as groupings.
  local cohortOnly = s.by(['job'] + cohortLabels);
  local cohort = s.by(['job'] + cohortLabels + ['profile']);
  local rec(name) = s.sel(name);
  // Targets busier than their peers (their disk's I/O per second over the cohort's median, in a
  // fifth of the samples of `peerWindow`): left out of the cohort's reference.
  local busy(read) = 'unless on (%s) %s >= %s' % [target, read, c.peerBusyRatio];
  local busyNow = busy('last_over_time(%s[1h])' % rec('diskprobe:target_disk_ios:peer_ratio_p80_12h'));
  // A 30-minute stage's recording read by a later stage: its last evaluation, whichever group
  // ran first.
  local scored(name) = 'last_over_time(%s[1h])' % rec(name);
  local inCohort = rec('diskprobe:probe_latency_p99:last_in_cohort');
  // The cohort's median of `what` at like load, and the modified z-score of each disk's `what`.
  local cohortMedianOf(what) = |||
    quantile by (%s) (0.5,
      %s
        %s
    )
  ||| % [cohort, scored('diskprobe:probe_latency_p99:%s' % what), busyNow];
  local cohortMedian(what) = {
    record: 'diskprobe_cohort:probe_latency_p99:%s' % what,
    expr: cohortMedianOf(what),
  };
  local cohortMAD(what) = {
    record: 'diskprobe_cohort:probe_latency_p99:%s_mad' % what,
    expr: |||
      quantile by (%(cohort)s) (0.5,
        abs(
          %(disk)s
          - on (%(cohort)s) group_left
          %(median)s
        )
          %(busy)s
      )
    ||| % {
      cohort: cohort,
      disk: scored('diskprobe:probe_latency_p99:%s' % what),
      median: std.join('\n    ', std.split(std.rstripChars(cohortMedianOf(what), '\n'), '\n')),
      busy: busyNow,
    },
  };
  local score(what, scoreName) = {
    record: 'diskprobe:probe_latency_p99:%s' % scoreName,
    expr: |||
      0.6745 * (
        %(disk)s
        - on (%(cohort)s) group_left
        %(median)s
      )
      / on (%(cohort)s) group_left
      clamp_min(%(mad)s, %(floor)s)
    ||| % {
      cohort: cohort,
      disk: scored('diskprobe:probe_latency_p99:%s' % what),
      median: scored('diskprobe_cohort:probe_latency_p99:%s' % what),
      mad: scored('diskprobe_cohort:probe_latency_p99:%s_mad' % what),
      floor: c.peerMADFloor,
    },
  };
  local window = c.peerWindow;
  [
    {
      name: 'diskprobe.fleet.sample',
      interval: '5m',
      rules: [
        {
          record: 'diskprobe:probe_latency_p99:last',
          expr: 'max without (%s, device, stat) (%s > 0)' % [volatile, s.sel('diskprobe_probe_latency_seconds', ['stat="p99"'])],
        },
        {
          record: 'diskprobe:probe_iops:last',
          expr: 'max without (%s, device) (%s > 0)' % [volatile, s.sel('diskprobe_probe_iops')],
        },
        {
          record: 'diskprobe:probe_throughput_bytes_per_second:last',
          expr: 'max without (%s, device) (%s > 0)' % [volatile, s.sel('diskprobe_probe_throughput_bytes_per_second')],
        },
        // A target's cohort: the `cohort` it is configured with, else the model and rotational
        // of the whole disks its I/O lands on (diskprobe_target_disk_info: a volume's disks, a
        // partition's disk), else of the device under it (agents without target_disk_info). One
        // series per target whatever its copies say: a configured cohort wins over the disk's
        // model (`or on`), and of two copies that disagree (two scrapes of one agent while a
        // reload sets its cohort, two pods of one node in a rollout) one is taken; of two models
        // on one kernel name (series that end without a staleness marker) one is taken.
        {
          record: 'diskprobe:target_cohort:info',
          expr: |||
            topk by (%(target)s) (1,
              max by (%(byCohort)s) (%(named)s)
              %(storageClass)sor on (%(target)s)
              max by (%(byDisk)s) (
                max by (%(byDevice)s) (%(targetDisks)s and on (%(target)s) %(unnamedAny)s)
                * on (%(device)s) group_left (%(diskLabels)s)
                %(diskInfo)s
              )
              or on (%(target)s)
              max by (%(byDisk)s) (
                max by (%(byDevice)s) (%(unnamed)s)
                * on (%(device)s) group_left (%(diskLabels)s)
                %(diskInfo)s
              )
            )
          ||| % {
            target: target,
            byCohort: s.by(['job', 'instance', 'target', c.cohortLabel]),
            named: s.sel('diskprobe_target_info', ['%s!=""' % c.cohortLabel]),
            // A PersistentVolume's target: its StorageClass (one per PV name and cluster).
            storageClass: if !c.pvStorageClassCohorts then '' else |||
              or on (%(target)s)
              max by (%(byCohort)s) (
                %(unnamedAny)s
                * on (%(pv)s) group_left (%(cohort)s)
                %(classes)s
              )
            ||| % {
              target: target,
              byCohort: s.by(['job', 'instance', 'target', c.cohortLabel]),
              unnamedAny: s.sel('diskprobe_target_info', ['%s=""' % c.cohortLabel]),
              pv: s.by(['target']),
              cohort: c.cohortLabel,
              classes: s.one(s.by(['target']), 'max by (%s) (label_replace(label_replace(%s, "target", "%s$1", "persistentvolume", "(.+)"), "%s", "$1", "storageclass", "(.+)"))' % [
                s.by(['target', c.cohortLabel]),
                s.selJob(c.kubeStateMetricsSelector, 'kube_persistentvolume_info', ['storageclass!=""']),
                c.pvTargetPrefix,
                c.cohortLabel,
              ]),
            },
            byDisk: s.by(['job', 'instance', 'target'] + c.cohortDiskLabels),
            byDevice: s.by(['job', 'instance', 'target', 'device']),
            unnamed: s.sel('diskprobe_target_info', ['%s=""' % c.cohortLabel, 'device!=""']),
            unnamedAny: s.sel('diskprobe_target_info', ['%s=""' % c.cohortLabel]),
            targetDisks: s.sel('diskprobe_target_disk_info'),
            device: s.by(['job', 'instance', 'device']),
            diskLabels: std.join(', ', c.cohortDiskLabels),
            diskInfo: s.one(s.by(['job', 'instance', 'device']), 'max by (%s) (%s)' % [
              s.by(['job', 'instance', 'device'] + c.cohortDiskLabels),
              s.sel('diskprobe_disk_info', ['%s!=""' % c.cohortDiskLabels[0]]),
            ]),
          },
        },
        // The workload of the disk under each target (its parent disk for a partition): reads
        // and writes completed per second. It counts requests, not busy time, which a slow disk
        // inflates.
        {
          record: 'diskprobe:target_disk_ios:rate5m',
          expr: |||
            max by (%(target)s) (
              max by (%(byDevice)s) (
                label_replace(%(info)s, "device", "$1", "parent", "(.+)")
              )
              * on (%(device)s) group_left
              max by (%(device)s) (
                rate(%(reads)s[5m]) + rate(%(writes)s[5m])
              )
            )
          ||| % {
            target: target,
            byDevice: s.by(['job', 'instance', 'target', 'device']),
            info: s.sel('diskprobe_target_info', ['device!=""']),
            device: s.by(['job', 'instance', 'device']),
            reads: s.sel('diskprobe_disk_reads_completed_total'),
            writes: s.sel('diskprobe_disk_writes_completed_total'),
          },
        },
      ],
    },
    {
      name: 'diskprobe.fleet.cohort',
      interval: '5m',
      rules: [
        // The last p99 and the workload of each target that has a cohort, with its cohort's labels
        // (the recording is read through the look-back window, which can hold the series of the
        // last two evaluations when the choice changed: one of them again).
        {
          record: 'diskprobe:probe_latency_p99:last_in_cohort',
          expr: |||
            %s
            * on (%s) group_left (%s) %s
          ||| % [rec('diskprobe:probe_latency_p99:last'), target, std.join(', ', cohortLabels), s.one(target, rec('diskprobe:target_cohort:info'))],
        },
        {
          record: 'diskprobe:target_disk_ios:rate5m_in_cohort',
          expr: |||
            %s
            * on (%s) group_left (%s) %s
          ||| % [rec('diskprobe:target_disk_ios:rate5m'), target, std.join(', ', cohortLabels), s.one(target, rec('diskprobe:target_cohort:info'))],
        },
      ],
    },
    {
      name: 'diskprobe.fleet.busy',
      interval: '5m',
      rules: [
        // Each disk's workload against its cohort's median at the same moment (at least 1 I/O
        // per second), for cohorts of at least `cohortMinSize`.
        {
          record: 'diskprobe:target_disk_ios:peer_ratio',
          expr: |||
            %(ios)s
            / on (%(cohort)s) group_left
            clamp_min(
              quantile by (%(cohort)s) (0.5, %(ios)s)
                and count by (%(cohort)s) (%(ios)s) >= %(min)s,
              1
            )
          ||| % { ios: rec('diskprobe:target_disk_ios:rate5m_in_cohort'), cohort: cohortOnly, min: c.cohortMinSize },
        },
      ],
    },
    {
      name: 'diskprobe.fleet.busy_12h',
      interval: '30m',
      rules: [
        // How much busier than its peers each disk was in its busier samples.
        {
          record: 'diskprobe:target_disk_ios:peer_ratio_p80_12h',
          expr: 'quantile_over_time(0.8, %s[%s])' % [rec('diskprobe:target_disk_ios:peer_ratio'), window],
        },
      ],
    },
    {
      name: 'diskprobe.fleet.median',
      interval: '5m',
      rules: [
        // The reference of a cohort at each moment: the median of the last p99s of its members
        // at like load, when at least `cohortMinSize` such members have one. A member is a disk:
        // targets on one disk (diskprobe_target_disk_info; a disk probed by two rules) count
        // once, as their mean.
        {
          record: 'diskprobe_cohort:probe_latency_p99:median',
          expr: |||
            quantile by (%(cohort)s) (0.5, %(disks)s)
            and
            count by (%(cohort)s) (%(disks)s) >= %(min)s
          ||| % {
            cohort: cohort,
            min: c.cohortMinSize,
            disks: |||
              avg by (%(byDisk)s) (
                (
                  %(last)s
                    %(busy)s
                )
                * on (%(target)s) group_left (disk)
                %(diskOf)s
              )
            ||| % {
              byDisk: s.by(['job', 'instance', 'disk'] + cohortLabels + ['profile']),
              last: inCohort,
              busy: busyNow,
              target: target,
              diskOf: s.one(target, |||
                max by (%(byDisk)s) (label_replace(%(targetDisks)s, "disk", "$1", "device", "(.+)"))
                or on (%(target)s)
                max by (%(byDisk)s) (label_replace(%(info)s, "disk", "target/$1", "target", "(.+)"))
              ||| % {
                byDisk: s.by(['job', 'instance', 'target', 'disk']),
                targetDisks: s.sel('diskprobe_target_disk_info'),
                target: target,
                info: s.sel('diskprobe_target_info'),
              }),
            },
          },
        },
      ],
    },
    {
      name: 'diskprobe.fleet.ratio',
      interval: '5m',
      rules: [
        // Each disk's last p99 against its cohort's median at the same moment.
        {
          record: 'diskprobe:probe_latency_p99:peer_ratio',
          expr: |||
            %s
            / on (%s) group_left
            %s
          ||| % [inCohort, cohort, rec('diskprobe_cohort:probe_latency_p99:median')],
        },
      ],
    },
    {
      name: 'diskprobe.fleet.score',
      interval: '30m',
      rules: [
        // A disk's typical sample (the median ratio), once it has `peerMinHistory` of samples,
        // and its slower ones (the 80th percentile: a fifth of its samples are at least this far
        // above its peers).
        {
          record: 'diskprobe:probe_latency_p99:peer_ratio_median_12h',
          expr: |||
            quantile_over_time(0.5, %s[%s])
              and last_over_time(%s[1h] offset %s)
          ||| % [rec('diskprobe:probe_latency_p99:peer_ratio'), window, rec('diskprobe:probe_latency_p99:peer_ratio'), c.peerMinHistory],
        },
        {
          record: 'diskprobe:probe_latency_p99:peer_ratio_p80_12h',
          expr: |||
            quantile_over_time(0.8, %s[%s])
              and last_over_time(%s[1h] offset %s)
          ||| % [rec('diskprobe:probe_latency_p99:peer_ratio'), window, rec('diskprobe:probe_latency_p99:peer_ratio'), c.peerMinHistory],
        },
        // The cohort's median p99 over 6 hours, for its cohort-wide alert and annotations.
        {
          record: 'diskprobe_cohort:probe_latency_p99:median_6h',
          expr: 'quantile_over_time(0.5, %s[6h])' % rec('diskprobe_cohort:probe_latency_p99:median'),
        },
      ],
    },
    {
      name: 'diskprobe.fleet.cohort_score',
      interval: '30m',
      rules: [
        // The cohort's median of each disk's median and 80th percentile, and their median
        // absolute deviation.
        cohortMedian('peer_ratio_median_12h'),
        cohortMAD('peer_ratio_median_12h'),
        cohortMedian('peer_ratio_p80_12h'),
        cohortMAD('peer_ratio_p80_12h'),
      ],
    },
    {
      name: 'diskprobe.fleet.peer_score',
      interval: '30m',
      rules: [
        // How unusual each disk is among its cohort's disks at like load: the modified z-score
        // 0.6745 (x - median) / MAD (Iglewicz and Hoaglin: above 3.5 is an outlier).
        score('peer_ratio_median_12h', 'peer_score_median_12h'),
        score('peer_ratio_p80_12h', 'peer_score_p80_12h'),
      ],
    },
  ]
