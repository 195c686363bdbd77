//! Metrics about the exporter itself: `diskprobe_build_info`, the configuration reload state and
//! when the served TLS certificate expires.

use super::{CollectError, Collector};
use crate::exposition::{Family, labels};
use crate::host::unix_now;
use std::sync::Mutex;

/// Whether the last (re)load of the configuration worked, and when one last did.
#[derive(Debug)]
pub(crate) struct ReloadStatus {
    state: Mutex<(bool, f64)>,
}

impl ReloadStatus {
    /// Status right after the initial load succeeded.
    pub(crate) fn loaded_now() -> Self {
        ReloadStatus {
            state: Mutex::new((true, unix_now())),
        }
    }

    /// Records a successful (re)load at the current time.
    pub(crate) fn record_success(&self) {
        *self.lock() = (true, unix_now());
    }

    /// Records a failed reload; the success timestamp keeps its previous value.
    pub(crate) fn record_failure(&self) {
        self.lock().0 = false;
    }

    /// `(last_reload_successful, last_success_unix_seconds)`.
    pub(crate) fn get(&self) -> (bool, f64) {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (bool, f64)> {
        // A poisoned lock only means a panic elsewhere while holding two plain values.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// When the certificate the web configuration in force serves expires (Unix seconds); set at
/// start and by every web configuration reload that succeeds.
#[derive(Debug, Default)]
pub(crate) struct CertExpiry(Mutex<Option<i64>>);

impl CertExpiry {
    /// Records the expiry of the certificate now served (`None`: no TLS, or not readable).
    pub(crate) fn set(&self, not_after: Option<i64>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = not_after;
    }

    fn get(&self) -> Option<i64> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reports build information, the reload status and the certificate's expiry.
pub(crate) struct ExporterCollector {
    reload: std::sync::Arc<ReloadStatus>,
    cert: std::sync::Arc<CertExpiry>,
}

impl ExporterCollector {
    /// A collector reading `reload` and `cert`.
    pub(crate) fn new(
        reload: std::sync::Arc<ReloadStatus>,
        cert: std::sync::Arc<CertExpiry>,
    ) -> Self {
        ExporterCollector { reload, cert }
    }
}

/// The crate version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git revision, when the build set `DISKPROBE_REVISION`.
pub(crate) const REVISION: &str = match option_env!("DISKPROBE_REVISION") {
    Some(r) => r,
    None => "unknown",
};

impl Collector for ExporterCollector {
    fn name(&self) -> &'static str {
        "exporter"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let mut info = Family::gauge(
            "diskprobe_build_info",
            "A metric with a constant '1' value labeled by version, revision, and the target os and arch for which diskprobe_exporter was built.",
        );
        info.push(
            &labels(&[
                ("version", VERSION),
                ("revision", REVISION),
                ("os", std::env::consts::OS),
                ("arch", std::env::consts::ARCH),
            ]),
            1.0,
        );
        info.finish_into(out);
        let (ok, ts) = self.reload.get();
        let mut success = Family::gauge(
            "diskprobe_config_last_reload_successful",
            "Whether the last configuration reload attempt was successful.",
        );
        success.push(&labels(&[]), if ok { 1.0 } else { 0.0 });
        success.finish_into(out);
        let mut when = Family::gauge(
            "diskprobe_config_last_reload_success_timestamp_seconds",
            "Timestamp of the last successful configuration reload.",
        );
        when.push(&labels(&[]), ts);
        when.finish_into(out);
        if let Some(not_after) = self.cert.get() {
            let mut expiry = Family::gauge(
                "diskprobe_web_tls_cert_expiry_timestamp_seconds",
                "When the TLS certificate served (the first in tls_server_config.cert_file) expires, as a Unix timestamp; absent without TLS.",
            );
            #[allow(clippy::cast_precision_loss)] // Unix seconds fit a f64 exactly
            expiry.push(&labels(&[]), not_after as f64);
            expiry.finish_into(out);
        }
        Ok(())
    }
}
