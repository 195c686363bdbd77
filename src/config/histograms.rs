//! Validation of `[histograms]`: the classic bucket layout of the latency histograms.
//!
//! `classic_buckets` is `"coarse"` (the default), `"fine"`, or a list of upper bounds in seconds
//! (numbers, strictly increasing, above zero). Native buckets need no configuration: their
//! resolution is fixed ([`crate::histogram::NATIVE_SCHEMA`]) and a Prometheus server that wants
//! fewer can reduce it on its side.

use super::raw::RawHistograms;
use super::spanned::SpannedError;
use crate::histogram::ClassicBuckets;

/// `[histograms]`, validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramsConfig {
    /// Classic buckets of every latency histogram.
    pub classic_buckets: ClassicBuckets,
}

pub(super) fn validate(raw: &RawHistograms) -> Result<HistogramsConfig, SpannedError> {
    let Some(value) = &raw.classic_buckets else {
        return Ok(HistogramsConfig::default());
    };
    let invalid = |message: String| SpannedError {
        span: value.span(),
        message: format!("histograms.classic_buckets: {message}"),
    };
    let expected = "expected \"coarse\", \"fine\" or a list of upper bounds in seconds";
    let classic_buckets = match value.get_ref() {
        toml::Value::String(name) if name == "coarse" => ClassicBuckets::coarse(),
        toml::Value::String(name) if name == "fine" => ClassicBuckets::fine(),
        toml::Value::String(name) => return Err(invalid(format!("{expected}, found {name:?}"))),
        toml::Value::Array(items) => {
            let bounds = items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    toml::Value::Float(x) => Ok(*x),
                    toml::Value::Integer(n) => Ok(*n as f64),
                    other => Err(invalid(format!(
                        "bucket bound number {} is not a number of seconds, found {other}",
                        i + 1
                    ))),
                })
                .collect::<Result<Vec<f64>, _>>()?;
            ClassicBuckets::new(bounds).map_err(|e| invalid(e.to_string()))?
        }
        other => return Err(invalid(format!("{expected}, found {other}"))),
    };
    Ok(HistogramsConfig { classic_buckets })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::histogram::ClassicBuckets;
    use std::path::Path;

    fn load(text: &str) -> Result<ClassicBuckets, String> {
        Config::from_toml(text, Path::new("h.toml"))
            .map(|c| c.histograms.classic_buckets)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn layouts_by_name_or_list() {
        assert_eq!(load(""), Ok(ClassicBuckets::coarse()));
        assert_eq!(load("[histograms]\n"), Ok(ClassicBuckets::coarse()));
        let coarse = "[histograms]\nclassic_buckets = \"coarse\"\n";
        assert_eq!(load(coarse), Ok(ClassicBuckets::coarse()));
        let fine = "[histograms]\nclassic_buckets = \"fine\"\n";
        assert_eq!(load(fine), Ok(ClassicBuckets::fine()));
        let list = "[histograms]\nclassic_buckets = [0.0005, 0.001, 1, 2.5]\n";
        assert_eq!(load(list).unwrap().bounds(), [0.0005, 0.001, 1.0, 2.5]);
    }

    #[test]
    fn bad_layouts_are_located() {
        for (text, error) in [
            (
                "[histograms]\nclassic_buckets = \"medium\"\n",
                "h.toml:2:19: histograms.classic_buckets: expected \"coarse\", \"fine\" or a list of upper bounds in seconds, found \"medium\"",
            ),
            (
                "[histograms]\nclassic_buckets = 3\n",
                "h.toml:2:19: histograms.classic_buckets: expected \"coarse\", \"fine\" or a list of upper bounds in seconds, found 3",
            ),
            (
                "[histograms]\nclassic_buckets = []\n",
                "h.toml:2:19: histograms.classic_buckets: expected at least one bucket bound",
            ),
            (
                "[histograms]\nclassic_buckets = [0.1, 0.1]\n",
                "h.toml:2:19: histograms.classic_buckets: bucket bound 0.1 (number 2) is not above the one before it",
            ),
            (
                "[histograms]\nclassic_buckets = [0.1, -1]\n",
                "h.toml:2:19: histograms.classic_buckets: bucket bound -1 (number 2) is not a finite number of seconds above zero",
            ),
            (
                "[histograms]\nclassic_buckets = [0.1, inf]\n",
                "h.toml:2:19: histograms.classic_buckets: bucket bound inf (number 2) is not a finite number of seconds above zero",
            ),
            (
                "[histograms]\nclassic_buckets = [0.1, \"1ms\"]\n",
                "h.toml:2:19: histograms.classic_buckets: bucket bound number 2 is not a number of seconds, found \"1ms\"",
            ),
            (
                "[histograms]\nclassic_bucket = \"fine\"\n",
                "h.toml:2:1: histograms.classic_bucket: unknown field `classic_bucket`, expected `classic_buckets`",
            ),
        ] {
            assert_eq!(load(text).unwrap_err(), error);
        }
    }
}
