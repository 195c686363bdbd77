//! The .deb and .rpm packages `packaging/build` makes (docs/deployment.md, "Install from a
//! package"). The .deb is installed on this machine with `dpkg -i` and met as an operator meets
//! it: its files and configuration files, the unit's enablement links and `systemd-analyze
//! verify`, maintainer scripts that succeed without a running systemd and start nothing, the
//! installed binary run as the unit runs it (`--config.check`, then a start on 127.0.0.1 with the
//! installed configuration, whose one target is the probe file in the state directory, laid out
//! as systemd lays out a DynamicUser's: `/var/lib/private/diskprobe_exporter` behind the link
//! `/var/lib/diskprobe_exporter`), an upgrade over itself that keeps edited configuration files,
//! removal (configuration and state kept) and purge (nothing left). A guard purges the package
//! when the test fails midway and puts back a state directory that was there before it. The
//! .rpm's files, flags, dependencies and scripts are read with `rpm -qp`, and the packaged files
//! are checked against the hand-installed unit and the embedded default.
//!
//! The packages are built once, before the tests (`.ci/run` runs `packaging/build`, which takes
//! the release build's minutes): the tests read them from `$DISKPROBE_PACKAGES_DIR`, else
//! `target/packages`, and without them are skipped with that reason (a failure under
//! `DISKPROBE_TEST_STRICT=1`).

use crate::common::{self, Agent, skip::Need};
use crate::tools::{DPKG, RPM};

use diskprobe_exporter::config::Config;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The package's name and version (Cargo.toml's).
const PACKAGE: &str = "diskprobe_exporter";
const VERSION: &str = env!("CARGO_PKG_VERSION");

const BINARY: &str = "/usr/bin/diskprobe_exporter";
const UNIT: &str = "/usr/lib/systemd/system/diskprobe_exporter.service";
const CONFIG: &str = "/etc/diskprobe_exporter/config.toml";
const DEFAULTS: &str = "/etc/default/diskprobe_exporter";
/// The state directory where systemd keeps a DynamicUser's, and the link it makes to it.
const STATE: &str = "/var/lib/private/diskprobe_exporter";
const STATE_LINK: &str = "/var/lib/diskprobe_exporter";
const PRIVATE: &str = "/var/lib/private";
/// The unit's enablement link, and the mask deb-systemd-helper makes on removal.
const WANTS: &str = "/etc/systemd/system/multi-user.target.wants/diskprobe_exporter.service";
const MASK: &str = "/etc/systemd/system/diskprobe_exporter.service";
/// What deb-systemd-helper records of the unit's enablement and mask.
const HELPER_STATE: [&str; 3] = [
    "/var/lib/systemd/deb-systemd-helper-enabled/diskprobe_exporter.service.dsh-also",
    "/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/diskprobe_exporter.service",
    "/var/lib/systemd/deb-systemd-helper-masked/diskprobe_exporter.service",
];

/// The files of the .deb (its directories aside), and the repository file each is.
const DEB_FILES: [(&str, Option<&str>); 10] = [
    (DEFAULTS, Some("packaging/default")),
    (CONFIG, Some("packaging/config.toml")),
    (BINARY, None),
    (UNIT, Some("packaging/diskprobe_exporter.service")),
    (
        "/usr/share/doc/diskprobe_exporter/README.md",
        Some("README.md"),
    ),
    (
        "/usr/share/doc/diskprobe_exporter/copyright",
        Some("LICENSE"),
    ),
    (
        "/usr/share/doc/diskprobe_exporter/examples/cloud-stats.conf",
        Some("deploy/systemd/cloud-stats.conf"),
    ),
    (
        "/usr/share/doc/diskprobe_exporter/examples/config.example.toml",
        Some("config.example.toml"),
    ),
    ("/usr/share/man/man1/diskprobe_exporter-probe.1.gz", None),
    ("/usr/share/man/man1/diskprobe_exporter.1.gz", None),
];

/// The .rpm's files and the directories it owns.
const RPM_FILES: [&str; 15] = [
    DEFAULTS,
    "/etc/diskprobe_exporter",
    CONFIG,
    BINARY,
    "/usr/lib/systemd/system-preset/90-diskprobe_exporter.preset",
    UNIT,
    "/usr/share/doc/diskprobe_exporter",
    "/usr/share/doc/diskprobe_exporter/README.md",
    "/usr/share/doc/diskprobe_exporter/examples",
    "/usr/share/doc/diskprobe_exporter/examples/cloud-stats.conf",
    "/usr/share/doc/diskprobe_exporter/examples/config.example.toml",
    "/usr/share/licenses/diskprobe_exporter",
    "/usr/share/licenses/diskprobe_exporter/LICENSE",
    "/usr/share/man/man1/diskprobe_exporter-probe.1.gz",
    "/usr/share/man/man1/diskprobe_exporter.1.gz",
];

/// What a package that differs from the source means.
const STALE: &str = "the packages are older than the source: run packaging/build";

/// The packages of this version, built by `packaging/build`.
pub const PACKAGES: Need = Need::check(
    "the .deb and .rpm of this version in $DISKPROBE_PACKAGES_DIR or target/packages (run \
     packaging/build; .ci/run does)",
    || deb().is_some() && rpm().is_some(),
);

/// No running systemd: where it runs, installing the .deb starts the service on :9957, every
/// interface, which a test must not.
pub const NO_SYSTEMD: Need = Need::check(
    "a machine without a running systemd (where it runs, the .deb's postinst starts the service \
     on :9957)",
    || !Path::new("/run/systemd/system").exists(),
);

/// Where `packaging/build` put the packages.
fn packages_dir() -> PathBuf {
    std::env::var_os("DISKPROBE_PACKAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::repo_root().join("target/packages"))
}

/// The file of `packages_dir()` whose name starts with `prefix` and ends with `suffix`.
fn package_file(prefix: &str, suffix: &str) -> Option<PathBuf> {
    std::fs::read_dir(packages_dir())
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
        })
}

fn deb() -> Option<PathBuf> {
    package_file(&format!("{PACKAGE}_{VERSION}_"), ".deb")
}

fn rpm() -> Option<PathBuf> {
    package_file(&format!("{PACKAGE}-{VERSION}-"), ".rpm")
}

fn repo_file(path: &str) -> Vec<u8> {
    std::fs::read(common::repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn text(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Whether anything is at `path` (a dangling link included).
fn exists(path: &str) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn output_text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `program` with `args` (no standard input) and returns what it printed; fails the test
/// unless it succeeds.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let printed = output_text(&out);
    assert!(out.status.success(), "{program} {args:?}: {printed}");
    printed
}

/// dpkg with `args`, non-interactive, waiting while another dpkg or apt holds its lock.
fn dpkg(args: &[&str]) -> Output {
    // dpkg refuses to run without ldconfig and start-stop-daemon on PATH, which a user's PATH
    // may lack.
    let path = format!(
        "{}:/usr/local/sbin:/usr/sbin:/sbin",
        std::env::var("PATH").unwrap_or_default()
    );
    let patience = Instant::now() + Duration::from_secs(300);
    loop {
        let out = Command::new("dpkg")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .env("PATH", &path)
            .stdin(Stdio::null())
            .output()
            .expect("run dpkg");
        let locked = String::from_utf8_lossy(&out.stderr).contains("lock");
        if out.status.success() || !locked || Instant::now() > patience {
            return out;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// [`dpkg`], which must succeed without a warning (maintainer scripts print none).
fn dpkg_ok(args: &[&str]) -> String {
    let out = dpkg(args);
    let printed = output_text(&out);
    assert!(out.status.success(), "dpkg {args:?}:\n{printed}");
    assert!(
        !printed.to_lowercase().contains("warning"),
        "dpkg {args:?}:\n{printed}"
    );
    printed
}

/// dpkg's status and version of the package, None when dpkg does not know it.
fn status() -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status} ${Version}", PACKAGE])
        .output()
        .expect("run dpkg-query");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every path the package, its scripts, systemd's helpers or the agent make.
fn traces() -> Vec<&'static str> {
    DEB_FILES
        .iter()
        .map(|(path, _)| *path)
        .chain([
            "/etc/diskprobe_exporter",
            "/usr/share/doc/diskprobe_exporter",
            WANTS,
            MASK,
            STATE,
            STATE_LINK,
        ])
        .chain(HELPER_STATE)
        .collect()
}

/// The machine as the test found it, put back when the test ends, passes or fails: the package
/// purged, the state directory the test laid out removed, and a state directory that was there
/// before (an agent run by hand as root keeps its state in /var/lib/diskprobe_exporter) moved
/// back from where the test put it aside, since purge removes the package's state.
struct Installation {
    /// (where it was, where it is meanwhile)
    aside: Vec<(PathBuf, PathBuf)>,
    /// Whether the test made /var/lib/private.
    made_private: bool,
}

impl Installation {
    /// Fails the test where the package, or its files, are on the machine (an installation not
    /// the test's); moves an earlier state directory aside.
    fn prepare() -> Installation {
        assert_eq!(
            status(),
            None,
            "dpkg knows {PACKAGE} already: the test installs and purges the package, and leaves \
             an installation of the machine's own alone"
        );
        let found: Vec<&str> = traces()
            .into_iter()
            .filter(|p| exists(p) && *p != STATE && *p != STATE_LINK)
            .collect();
        assert!(
            found.is_empty(),
            "files of {PACKAGE} are on the machine already: {found:?}"
        );
        let mut aside: Vec<(PathBuf, PathBuf)> = Vec::new();
        for path in [STATE_LINK, STATE] {
            if exists(path) {
                let moved = PathBuf::from(format!(
                    "{path}.aside-for-packages-test-{}",
                    std::process::id()
                ));
                if let Err(err) = std::fs::rename(path, &moved) {
                    for (path, moved) in aside.iter().rev() {
                        let _ = std::fs::rename(moved, path);
                    }
                    panic!("cannot move {path} aside: {err}");
                }
                eprintln!(
                    "{path} was there before the test: kept at {}",
                    moved.display()
                );
                aside.push((PathBuf::from(path), moved));
            }
        }
        Installation {
            aside,
            made_private: !exists(PRIVATE),
        }
    }
}

impl Drop for Installation {
    fn drop(&mut self) {
        if status().is_some() {
            let out = dpkg(&["--purge", PACKAGE]);
            eprintln!(
                "cleaning up: dpkg --purge {PACKAGE}:\n{}",
                output_text(&out)
            );
        }
        // What the test laid out, should purge have left it.
        let _ = std::fs::remove_file(STATE_LINK).or_else(|_| std::fs::remove_dir_all(STATE_LINK));
        let _ = std::fs::remove_dir_all(STATE);
        if self.made_private {
            let _ = std::fs::remove_dir(PRIVATE);
        }
        for (path, aside) in self.aside.drain(..).rev() {
            if let Err(err) = std::fs::rename(&aside, &path) {
                eprintln!(
                    "cannot move {} back to {}: {err}",
                    aside.display(),
                    path.display()
                );
            }
        }
    }
}

/// Lays out the state directory as systemd does for the unit's `DynamicUser=yes` and
/// `StateDirectory=diskprobe_exporter`.
fn lay_out_state_directory() {
    if !exists(PRIVATE) {
        std::fs::create_dir(PRIVATE).unwrap();
        std::fs::set_permissions(PRIVATE, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    std::fs::create_dir(STATE).unwrap();
    std::fs::set_permissions(STATE, std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("private/diskprobe_exporter", STATE_LINK).unwrap();
}

/// The installed unit's command line, with ARGS of the installed defaults file in place of
/// `$ARGS`, and the environment the unit gives it (`STATE_DIRECTORY`).
fn unit_command() -> Command {
    let unit = text(UNIT);
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let defaults = text(DEFAULTS);
    let args = defaults
        .lines()
        .find_map(|l| l.strip_prefix("ARGS="))
        .expect("ARGS= in the defaults file")
        .trim_matches('"')
        .to_owned();
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some(BINARY), "ExecStart={exec}");
    let mut cmd = Command::new(BINARY);
    for word in words {
        if word == "$ARGS" {
            cmd.args(args.split_whitespace());
        } else {
            cmd.arg(word);
        }
    }
    cmd.env("STATE_DIRECTORY", STATE_LINK);
    cmd
}

/// Whether a process runs the installed binary (which only this test installs).
fn installed_binary_runs() -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .any(|e| std::fs::read_link(e.path().join("exe")).is_ok_and(|exe| exe == Path::new(BINARY)))
}

/// The long flags `--help` lists.
fn flags(help: &str) -> Vec<String> {
    let mut flags: Vec<String> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[' || c == ']')
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_owned()
        })
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

fn gunzip(path: &str) -> String {
    use std::io::Read;
    let mut page = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut page)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    page
}

/// The installed files: the list, the contents, the modes, the configuration files, the man
/// pages, and the binary being this source's.
fn check_installed_files() {
    let mut listed: Vec<String> = run("dpkg", &["-L", PACKAGE])
        .lines()
        .filter(|l| !Path::new(l).is_dir())
        .map(str::to_owned)
        .collect();
    listed.sort();
    let mut expected: Vec<&str> = DEB_FILES.iter().map(|(p, _)| *p).collect();
    expected.sort();
    assert_eq!(listed, expected, "dpkg -L {PACKAGE}");
    for (path, source) in DEB_FILES {
        let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mode = if path == BINARY { 0o755 } else { 0o644 };
        assert_eq!(meta.permissions().mode() & 0o7777, mode, "{path}");
        if let Some(source) = source {
            assert!(
                std::fs::read(path).unwrap() == repo_file(source),
                "{path} is not {source}: {STALE}"
            );
        }
    }
    let conffiles: Vec<String> = run("dpkg-query", &["-W", "-f=${Conffiles}\n", PACKAGE])
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert_eq!(conffiles, [DEFAULTS, CONFIG], "the package's conffiles");

    let version = run(BINARY, &["--version"]);
    assert_eq!(version.trim(), format!("{PACKAGE} {VERSION}"));
    let help = run(BINARY, &["--help"]);
    let source_help = String::from_utf8(
        Command::new(common::binary())
            .arg("--help")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(help, source_help, "{}: {STALE}", packages_dir().display());
    let page = gunzip("/usr/share/man/man1/diskprobe_exporter.1.gz");
    assert!(page.contains(".TH diskprobe_exporter 1"), "{page}");
    for flag in flags(&help) {
        assert!(
            page.contains(&flag.replace('-', "\\-")),
            "the man page lacks {flag}"
        );
    }
    assert!(page.contains("diskprobe_exporter\\-probe(1)"));
    let probe_page = gunzip("/usr/share/man/man1/diskprobe_exporter-probe.1.gz");
    assert!(
        probe_page.contains(".TH diskprobe_exporter-probe 1"),
        "{probe_page}"
    );
    for flag in flags(&run(BINARY, &["probe", "--help"])) {
        assert!(
            probe_page.contains(&flag.replace('-', "\\-")),
            "the probe man page lacks {flag}"
        );
    }
}

/// The unit is enabled (its link made by deb-systemd-helper, which systemd reads offline) and
/// verifies, its man page found.
fn check_unit_enabled_and_valid() {
    let link = std::fs::read_link(WANTS).unwrap_or_else(|e| panic!("{WANTS}: {e}"));
    assert_eq!(
        std::fs::canonicalize(WANTS).unwrap(),
        std::fs::canonicalize(UNIT).unwrap(),
        "{WANTS} -> {}",
        link.display()
    );
    assert_eq!(
        run(
            "systemctl",
            &["--root=/", "is-enabled", "diskprobe_exporter.service"]
        )
        .trim(),
        "enabled"
    );
    for record in &HELPER_STATE[..2] {
        assert!(exists(record), "deb-systemd-helper's {record}");
    }
    let verify = run("systemd-analyze", &["verify", UNIT]);
    assert_eq!(verify, "", "systemd-analyze verify {UNIT}");
}

/// The installed binary, run as the unit runs it with the installed configuration: checked,
/// started on a free port of 127.0.0.1, its two probes run on the probe file in the state
/// directory, stopped by its PID.
fn run_as_the_unit_does() {
    let check = run(
        BINARY,
        &["--config.check", &format!("--config.file={CONFIG}")],
    );
    assert!(check.contains("configuration is valid"), "{check}");
    lay_out_state_directory();
    let _machine = common::shared();
    let mut agent = Agent::start_command(unit_command());
    let m = common::wait_until(
        &agent,
        Duration::from_secs(120),
        "both profiles of the installed configuration",
        |m| common::sum(m, "diskprobe_probe_success", &["target=\"scratch\""]) >= 2.0,
    );
    assert_eq!(
        common::sum(
            &m,
            "diskprobe_build_info",
            &[&format!("version=\"{VERSION}\"")]
        ),
        1.0
    );
    let probe_file = format!("{STATE}/probe.dat");
    assert_eq!(common::file_len(Path::new(&probe_file)), 256 << 20);
    agent.terminate();
}

/// Edits both configuration files as an operator would; returns their new contents.
fn edit_configuration() -> (String, String) {
    let config = text(CONFIG).replace("interval = \"5m\"", "interval = \"10m\"");
    assert!(config.contains("interval = \"10m\""));
    std::fs::write(CONFIG, &config).unwrap();
    let defaults = text(DEFAULTS).replace("ARGS=\"\"", "ARGS=\"--log.level=debug\"");
    assert!(defaults.contains("--log.level=debug"));
    std::fs::write(DEFAULTS, &defaults).unwrap();
    (config, defaults)
}

/// Files dpkg leaves beside a conffile it did not replace (or replaced).
fn conffile_leftovers() -> Vec<PathBuf> {
    ["/etc/diskprobe_exporter", "/etc/default"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten())
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.contains(".dpkg-") || name.contains(".ucf-")
        })
        .filter(|p| p.to_string_lossy().contains("diskprobe_exporter"))
        .collect()
}

fn the_deb_installs_runs_upgrades_removes_and_purges_cleanly() {
    let deb = deb().unwrap();
    let deb = deb.to_str().unwrap();
    let installation = Installation::prepare();

    // Installed where systemd does not run: the scripts succeed and start nothing.
    dpkg_ok(&["--install", deb]);
    assert_eq!(
        status().as_deref(),
        Some(format!("install ok installed {VERSION}").as_str())
    );
    assert!(
        !installed_binary_runs(),
        "the maintainer scripts started the agent"
    );
    check_installed_files();
    check_unit_enabled_and_valid();
    run_as_the_unit_does();

    // An upgrade over itself keeps edited configuration files, asking nothing.
    let (config, defaults) = edit_configuration();
    dpkg_ok(&["--install", deb]);
    assert_eq!(
        status().as_deref(),
        Some(format!("install ok installed {VERSION}").as_str())
    );
    assert_eq!(text(CONFIG), config);
    assert_eq!(text(DEFAULTS), defaults);
    assert_eq!(conffile_leftovers(), Vec::<PathBuf>::new());
    check_unit_enabled_and_valid();
    assert!(!installed_binary_runs());

    // Removal keeps the configuration and the state; the unit is masked, as dh_installsystemd's
    // scripts leave it.
    dpkg_ok(&["--remove", PACKAGE]);
    assert_eq!(
        status().as_deref(),
        Some(format!("deinstall ok config-files {VERSION}").as_str())
    );
    for (path, _) in DEB_FILES {
        assert_eq!(exists(path), path == CONFIG || path == DEFAULTS, "{path}");
    }
    assert_eq!(text(CONFIG), config);
    assert_eq!(text(DEFAULTS), defaults);
    assert!(exists(&format!("{STATE}/probe.dat")), "the state is kept");
    assert_eq!(
        std::fs::read_link(STATE_LINK).unwrap(),
        Path::new("private/diskprobe_exporter")
    );
    assert_eq!(std::fs::read_link(MASK).unwrap(), Path::new("/dev/null"));

    // Purge leaves nothing: configuration, state, links, deb-systemd-helper's records.
    dpkg_ok(&["--purge", PACKAGE]);
    assert_eq!(status(), None);
    let left: Vec<&str> = traces().into_iter().filter(|p| exists(p)).collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    drop(installation);
}

/// What `rpm -qp` prints for `args` about the .rpm.
fn rpm_query(rpm: &Path, args: &[&str]) -> String {
    let out = Command::new("rpm")
        .args(args)
        .arg(rpm)
        .output()
        .expect("run rpm");
    assert!(out.status.success(), "rpm {args:?}: {}", output_text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// The SHA-256 of `path`, in hex.
fn sha256(path: &Path) -> String {
    run("sha256sum", &[path.to_str().unwrap()])
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

fn the_rpm_carries_the_debs_files_with_rpms_own_scripts() {
    let rpm = rpm().unwrap();
    assert_eq!(
        rpm_query(&rpm, &["-qp", "--qf", "%{NAME} %{VERSION}"]),
        format!("{PACKAGE} {VERSION}")
    );
    let listed: Vec<String> = rpm_query(&rpm, &["-qlp"])
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(listed, RPM_FILES);

    // Flags (c: %config, n: noreplace, l: %license), modes and digests, per file.
    let dump = rpm_query(
        &rpm,
        &[
            "-qp",
            "--qf",
            "[%{FILENAMES}\t%{FILEFLAGS:fflags}\t%{FILEMODES:octal}\t%{FILEDIGESTS}\n]",
        ],
    );
    let files: BTreeMap<&str, Vec<&str>> = dump
        .lines()
        .map(|l| {
            let mut fields = l.split('\t');
            (fields.next().unwrap(), fields.collect())
        })
        .collect();
    for (path, fields) in &files {
        let (flags, mode) = (fields[0], fields[1]);
        let expected_flags = match *path {
            CONFIG | DEFAULTS => "cn",
            "/usr/share/licenses/diskprobe_exporter/LICENSE" => "l",
            _ => "",
        };
        assert_eq!(flags, expected_flags, "{path}");
        let expected_mode = if *path == BINARY {
            "100755"
        } else if mode.starts_with("40") {
            "40755"
        } else {
            "100644"
        };
        assert_eq!(mode, expected_mode, "{path}");
    }
    let digest = |path: &str| files[path][2].to_owned();
    for (path, source) in DEB_FILES.iter().filter_map(|(p, s)| Some((*p, (*s)?))) {
        if path == "/usr/share/doc/diskprobe_exporter/copyright" {
            continue;
        }
        assert_eq!(
            digest(path),
            sha256(&common::repo_root().join(source)),
            "{path} is not {source}: {STALE}"
        );
    }
    assert_eq!(
        digest("/usr/share/licenses/diskprobe_exporter/LICENSE"),
        sha256(&common::repo_root().join("LICENSE"))
    );
    // The same binary and man pages as the .deb's.
    let unpacked = tempfile::tempdir().unwrap();
    run(
        "dpkg-deb",
        &[
            "--extract",
            deb().unwrap().to_str().unwrap(),
            unpacked.path().to_str().unwrap(),
        ],
    );
    for path in [
        BINARY,
        "/usr/share/man/man1/diskprobe_exporter.1.gz",
        "/usr/share/man/man1/diskprobe_exporter-probe.1.gz",
    ] {
        let in_deb = unpacked.path().join(path.trim_start_matches('/'));
        assert_eq!(digest(path), sha256(&in_deb), "{path}");
    }

    let requires = rpm_query(&rpm, &["-qpR"]);
    assert!(
        requires.lines().any(|l| l.starts_with("glibc >= 2.")),
        "{requires}"
    );

    // The scripts are packaging/rpm's, and only those.
    let scripts = rpm_query(&rpm, &["-qp", "--scripts"]);
    let mut found = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in scripts.lines() {
        if let Some(name) = line.strip_suffix(" scriptlet (using /bin/sh):") {
            found.extend(current.take());
            current = Some((name.to_owned(), String::new()));
        } else if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    found.extend(current.take());
    // rpm ends each scriptlet with an empty line.
    let found: BTreeMap<String, String> = found
        .into_iter()
        .map(|(name, body)| (name, body.trim_end().to_owned()))
        .collect();
    let expected: BTreeMap<String, String> = [
        ("postinstall", "packaging/rpm/post"),
        ("preuninstall", "packaging/rpm/preun"),
        ("postuninstall", "packaging/rpm/postun"),
    ]
    .into_iter()
    .map(|(name, file)| {
        let body = String::from_utf8(repo_file(file)).unwrap();
        (name.to_owned(), body.trim_end().to_owned())
    })
    .collect();
    assert_eq!(found, expected, "rpm -qp --scripts:\n{scripts}");
}

/// Comment and blank lines aside.
fn directives(unit: &str) -> Vec<String> {
    unit.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// The packaged unit is the hand-installed one at the packaged path, with the defaults file's
/// ARGS and the man page; the packaged configuration is the embedded default; the defaults
/// file names flags the agent has; the maintainer scripts parse; the LICENSE is the license
/// Cargo.toml names.
fn the_packaged_files_follow_the_hand_installed_unit_and_the_embedded_default() {
    let root = common::repo_root();
    let hand =
        std::fs::read_to_string(root.join("deploy/systemd/diskprobe_exporter.service")).unwrap();
    let packaged =
        std::fs::read_to_string(root.join("packaging/diskprobe_exporter.service")).unwrap();
    let expected: Vec<String> = directives(&hand)
        .into_iter()
        .flat_map(|l| {
            if let Some(exec) = l.strip_prefix("ExecStart=/usr/local/bin/") {
                vec![
                    "EnvironmentFile=-/etc/default/diskprobe_exporter".to_owned(),
                    format!("ExecStart=/usr/bin/{exec} $ARGS"),
                ]
            } else if let Some(docs) = l.strip_prefix("Documentation=") {
                vec![format!("Documentation=man:diskprobe_exporter(1) {docs}")]
            } else {
                vec![l]
            }
        })
        .collect();
    assert_eq!(directives(&packaged), expected);
    if let Some(analyze) = common::which("systemd-analyze") {
        let out = Command::new(analyze)
            .args(["verify", "--man=no"])
            .arg(root.join("packaging/diskprobe_exporter.service"))
            .output()
            .unwrap();
        let printed = output_text(&out);
        // The unit's own syntax (the binary is not installed here).
        assert!(
            !printed.contains("Unknown key") && !printed.contains("Invalid"),
            "{printed}"
        );
    }

    let config = Config::load(&root.join("packaging/config.toml")).expect("packaging/config.toml");
    let embedded = Config::embedded_default(Path::new(STATE_LINK));
    assert_eq!(config.targets, embedded.targets);
    assert!(config.discover.is_empty());

    let help = String::from_utf8(
        Command::new(common::binary())
            .arg("--help")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let known = flags(&help);
    let defaults = String::from_utf8(repo_file("packaging/default")).unwrap();
    let named = flags(&defaults);
    assert!(named.len() >= 7, "{named:?}");
    for flag in named {
        assert!(
            known.contains(&flag),
            "packaging/default names {flag}, unknown"
        );
    }
    assert!(defaults.lines().any(|l| l == "ARGS=\"\""));

    for script in [
        "packaging/deb/postinst",
        "packaging/deb/prerm",
        "packaging/deb/postrm",
        "packaging/rpm/post",
        "packaging/rpm/preun",
        "packaging/rpm/postun",
    ] {
        let path = root.join(script);
        assert!(
            String::from_utf8(repo_file(script))
                .unwrap()
                .starts_with("#!/bin/sh\n")
        );
        let out = Command::new("sh").arg("-n").arg(&path).output().unwrap();
        assert!(out.status.success(), "{script}: {}", output_text(&out));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{script} is executable");
    }

    assert_eq!(env!("CARGO_PKG_LICENSE"), "Apache-2.0");
    let license = String::from_utf8(repo_file("LICENSE")).unwrap();
    assert!(
        license.contains("Apache License\n                           Version 2.0, January 2004")
    );
    assert!(license.contains("END OF TERMS AND CONDITIONS"));
}

crate::tests! {
    the_deb_installs_runs_upgrades_removes_and_purges_cleanly:
        [ROOT, DPKG, crate::tools::SYSTEMD_ANALYZE, NO_SYSTEMD, PACKAGES],
    the_rpm_carries_the_debs_files_with_rpms_own_scripts: [RPM, DPKG, PACKAGES],
    the_packaged_files_follow_the_hand_installed_unit_and_the_embedded_default,
}
