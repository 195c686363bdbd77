//! Log setup: tracing to stderr, as logfmt or JSON.

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
