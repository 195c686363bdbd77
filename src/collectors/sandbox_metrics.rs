//! `diskprobe_sandbox_info`: the agent's self-confinement ([`crate::sandbox`]).

use super::{CollectError, Collector};
use crate::exposition::{Family, labels};
use crate::sandbox::Sandbox;
use std::sync::Arc;

/// Reports what confinement applies and what the check on a probe thread found.
pub(crate) struct SandboxCollector {
    sandbox: Arc<Sandbox>,
}

impl SandboxCollector {
    /// A collector reporting `sandbox`.
    pub(crate) fn new(sandbox: Arc<Sandbox>) -> Self {
        SandboxCollector { sandbox }
    }
}

impl Collector for SandboxCollector {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn collect(&self, out: &mut Vec<Family>) -> Result<(), CollectError> {
        let mut info = Family::gauge(
            "diskprobe_sandbox_info",
            "Self-confinement with Landlock: mode (--sandbox.landlock), the Landlock ABI the kernel offers (0: none; empty: not asked), how much of the ruleset is enforced (full, partial, no), and what a probe thread's attempt to write outside the allowed directories got (denied, allowed, unverified, pending, none).",
        );
        let mode = self.sandbox.mode().to_string();
        let abi = self
            .sandbox
            .landlock_abi()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let enforced = self.sandbox.enforced().to_string();
        let check = self.sandbox.check();
        info.push(
            &labels(&[
                ("mode", &mode),
                ("landlock_abi", &abi),
                ("enforced", &enforced),
                ("check", check.label()),
            ]),
            1.0,
        );
        info.finish_into(out);
        Ok(())
    }
}
