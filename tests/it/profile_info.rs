//! `diskprobe_profile_info` describes every profile of every target from the configuration, before
//! the first run: built-ins and a custom rate-capped profile, with the labels the alert rules
//! select on (`rw`, `block_size` in bytes, `iodepth`, `rate_iops`).

use crate::common;

use common::Agent;

fn profile_info_describes_each_profile_of_each_target() {
    let _guard = common::shared();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    // An interval of an hour: the first run may or may not have happened; the family does not
    // depend on it.
    let config = common::config_flag(
        dir.path(),
        &format!(
            "[diskstats]\ndevice_exclude = \"^$\"\n[defaults]\ninterval = \"1h\"\nruntime = \"100ms\"\n\
             [profiles.gentle]\nfio = \"-rw=randread -bs=4k -iodepth=1 -rate_iops=150\"\n\
             [[targets]]\nname = \"a\"\npath = \"{}\"\nsize = \"16MiB\"\n\
             profiles = [\"gentle\", \"randread-4k-qd32\", \"read-1m-qd16\"]\n",
            dir.path().join("probe.dat").display()
        ),
    );
    let agent = Agent::start(&[&config]);
    let (status, body) = agent.get("/metrics");
    assert_eq!(status, 200);
    let mut info: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("diskprobe_profile_info{"))
        .collect();
    info.sort();
    assert_eq!(
        info,
        [
            "diskprobe_profile_info{target=\"a\",profile=\"gentle\",rw=\"randread\",block_size=\"4096\",iodepth=\"1\",rate_iops=\"150\"} 1",
            "diskprobe_profile_info{target=\"a\",profile=\"randread-4k-qd32\",rw=\"randread\",block_size=\"4096\",iodepth=\"32\",rate_iops=\"0\"} 1",
            "diskprobe_profile_info{target=\"a\",profile=\"read-1m-qd16\",rw=\"read\",block_size=\"1048576\",iodepth=\"16\",rate_iops=\"0\"} 1",
        ]
    );
    common::promtool_check_metrics(&body);
}

crate::tests! {
    profile_info_describes_each_profile_of_each_target: [PROMTOOL],
}
