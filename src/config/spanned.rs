//! A validation error before it is given a file name and line ([`SpannedError`]: the byte span
//! of the offending value in the TOML text, and the message), and the checks every part of the
//! configuration shares. [`super::Config::from_toml`] turns it into a located
//! [`super::ConfigError`] (or, for what the machine's state says, a located
//! [`super::MachineFinding`]).

use std::ops::Range;
use toml::Spanned;

/// A validation error (or a finding about the machine's state) before it is given a file name
/// and line.
pub(crate) struct SpannedError {
    /// Bytes of the offending key or value in the TOML text.
    pub(crate) span: Range<usize>,
    /// What is wrong and what was expected, starting with the key.
    pub(crate) message: String,
}

/// An error about `value`, located at it.
pub(crate) fn invalid<T>(value: &Spanned<T>, message: String) -> SpannedError {
    SpannedError {
        span: value.span(),
        message,
    }
}

/// Compiles the regular expression at `key`.
pub(crate) fn regex(key: &str, value: &Spanned<String>) -> Result<regex::Regex, SpannedError> {
    regex::Regex::new(value.get_ref()).map_err(|e| {
        // regex errors span several lines (pattern, caret, reason); keep the reason.
        let e = e.to_string();
        let reason = e.lines().last().unwrap_or(&e).trim_start_matches("error: ");
        invalid(
            value,
            format!("{key}: expected a regular expression, {reason}"),
        )
    })
}

/// Fails unless the name `value` holds only printable characters: no control characters (NUL,
/// newlines, tabs, escapes), which label values, log lines, thread names and the status page
/// cannot carry as they are.
pub(crate) fn printable(key: &str, value: &Spanned<String>) -> Result<(), SpannedError> {
    match value.get_ref().chars().position(char::is_control) {
        None => Ok(()),
        Some(at) => {
            let c = value.get_ref().chars().nth(at).unwrap_or_default();
            Err(invalid(
                value,
                format!(
                    "{key}: expected printable characters only, found U+{:04X} at character {}",
                    u32::from(c),
                    at + 1
                ),
            ))
        }
    }
}
