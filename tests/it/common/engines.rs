//! The rule engines the tests run the rules and the agent's series on: Debian 12's Prometheus
//! 2.42 (`prometheus` and `promtool` on `PATH`, the Debian package), Prometheus 3.5 LTS and
//! VictoriaMetrics 1.145 (`victoria-metrics`, `vmalert`, `vmalert-tool`), unpacked by
//! `tests/install-engines.sh` from Debian's unstable suite into the engines directory
//! (`DISKPROBE_ENGINES_DIR`, else `target/engines` of the repository), which the system's
//! packages never touch. A test asks for an [`Engine`]'s binaries; one that is missing
//! skips the test with the reason (strict: fails), [`crate::common::require`].

use std::path::PathBuf;

/// A rule engine whose server and rule-test tool the tests run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Debian 12's Prometheus 2.42 (the Debian package, on `PATH`): range selectors include a
    /// sample on the range's left edge.
    Prometheus2,
    /// Prometheus 3.5 LTS (`tests/install-engines.sh`): range selectors leave a sample on the
    /// range's left edge out.
    Prometheus3,
    /// VictoriaMetrics 1.145 (`tests/install-engines.sh`): MetricsQL, ranges like Prometheus 3,
    /// samples kept with 12 significant decimal digits; rules evaluated by `vmalert`, tested by
    /// `vmalert-tool unittest`.
    VictoriaMetrics,
}

/// Every Prometheus engine, the Debian package first.
pub const PROMETHEUS_ENGINES: [Engine; 2] = [Engine::Prometheus2, Engine::Prometheus3];

/// Where `tests/install-engines.sh` unpacks the engines.
pub fn engines_dir() -> PathBuf {
    std::env::var_os("DISKPROBE_ENGINES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::common::repo_root().join("target/engines"))
}

impl Engine {
    /// Its name in test output and in the generator's `--engine` argument.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Prometheus2 => "prometheus2",
            Engine::Prometheus3 => "prometheus3",
            Engine::VictoriaMetrics => "victoriametrics",
        }
    }

    /// How a skip names it, with where it comes from.
    pub fn what(self) -> &'static str {
        match self {
            Engine::Prometheus2 => "Prometheus 2.42 (Debian package prometheus)",
            Engine::Prometheus3 => {
                "Prometheus 3.5 (tests/install-engines.sh, into $DISKPROBE_ENGINES_DIR or target/engines)"
            }
            Engine::VictoriaMetrics => {
                "VictoriaMetrics 1.145 (tests/install-engines.sh, into $DISKPROBE_ENGINES_DIR or target/engines)"
            }
        }
    }

    /// Its binary `name` (`promtool`, `vmalert`, `victoria-metrics`, ...), if installed.
    pub fn tool(self, name: &str) -> Option<PathBuf> {
        match self {
            Engine::Prometheus2 => crate::common::which(name),
            Engine::Prometheus3 | Engine::VictoriaMetrics => {
                let dir = match self {
                    Engine::Prometheus3 => "prometheus3",
                    _ => "victoria-metrics",
                };
                let path = engines_dir().join(dir).join("usr/bin").join(name);
                path.is_file().then_some(path)
            }
        }
    }

    /// Its rule-test tool (`promtool`, `vmalert-tool`), if installed.
    pub fn rule_tester(self) -> Option<PathBuf> {
        match self {
            Engine::VictoriaMetrics => self.tool("vmalert-tool"),
            _ => self.promtool(),
        }
    }

    /// Its rule evaluator (`prometheus`, `vmalert`), if installed.
    pub fn rule_evaluator(self) -> Option<PathBuf> {
        match self {
            Engine::VictoriaMetrics => self.tool("vmalert"),
            _ => self.prometheus(),
        }
    }

    /// Its `promtool`, if installed.
    pub fn promtool(self) -> Option<PathBuf> {
        self.tool("promtool")
    }

    /// Its `prometheus` server, if installed.
    pub fn prometheus(self) -> Option<PathBuf> {
        self.tool("prometheus")
    }

    /// Its version as its `promtool --version` prints it (`3.5.3+ds1`), or, for
    /// VictoriaMetrics (whose Debian build prints none), the package version
    /// `tests/install-engines.sh` wrote beside it (`1.145.0+ds1-2`), for test output.
    pub fn version(self) -> String {
        if self == Engine::VictoriaMetrics {
            return std::fs::read_to_string(engines_dir().join("victoria-metrics/VERSION"))
                .map(|v| v.trim().to_owned())
                .unwrap_or_else(|_| "not installed".to_owned());
        }
        let Some(tool) = self.promtool() else {
            return "not installed".to_owned();
        };
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .ok()
            .and_then(|out| {
                let text = String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr);
                let line = text.lines().next()?.to_owned();
                line.split_whitespace()
                    .skip_while(|w| *w != "version")
                    .nth(1)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "unknown".to_owned())
    }

    /// Whether its rule-test tool and its rule evaluator are there; otherwise the test is
    /// skipped with the reason (strict: fails).
    pub fn require(self) -> bool {
        crate::common::require(
            self.rule_tester().is_some() && self.rule_evaluator().is_some(),
            self.what(),
        )
    }
}
