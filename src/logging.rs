//! Log setup: tracing to stderr, as logfmt or JSON; an error with its causes, each said once
//! ([`error_chain`]).

use crate::cli::{LogFormat, LogLevel};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::prelude::*;

/// Installs the global subscriber. Call once, before anything logs.
pub fn init(level: LogLevel, format: LogFormat) {
    let filter = match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error => LevelFilter::ERROR,
    };
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Logfmt => registry
            .with(
                tracing_logfmt::builder()
                    // `target` is our label for probe targets; module paths are noise here.
                    .with_target(false)
                    .with_span_name(false)
                    .with_span_path(false)
                    .layer()
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_target(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    if let Err(err) = result {
        eprintln!("logging already initialised: {err}");
    }
}

/// `err` and its causes, each cause added (after `: `) only where the text before it does not
/// already say it: many errors name their cause in their own message, and printing the chain
/// as it is would say it twice.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Naming(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Silent(#[source] std::io::Error);

    #[test]
    fn a_cause_the_message_names_is_not_repeated() {
        let io = || std::io::Error::other("inner");
        assert_eq!(error_chain(&Naming(io())), "outer: inner");
        assert_eq!(error_chain(&Silent(io())), "outer: inner");
        let wrapped = anyhow::Error::from(Naming(io())).context("start");
        assert_eq!(error_chain(wrapped.as_ref()), "start: outer: inner");
    }
}
