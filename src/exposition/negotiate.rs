//! Content negotiation for `/metrics`: the wire format from `Accept`, the compression from
//! `Accept-Encoding`, both with q-values (RFC 9110, 12.5).
//!
//! Every request gets an answer: a header that is absent, malformed or accepts nothing we offer
//! gets the text format 0.0.4, uncompressed, as node_exporter answers it. Elements that do not
//! parse (a bad media type, a q-value that is not a number from 0 to 1) are skipped, the rest of
//! the header still counts.

use mediatype::{MediaType, MediaTypeList, ReadParams, names};

/// A wire format for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Text,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily;
    /// encoding=delimited`: the only format with native histograms.
    Protobuf,
}

/// Formats in the order preferred when the scraper likes several equally and names none of them
/// (`*/*`): the text format first, as exporters answer a plain `curl`.
const FORMATS: [Format; 3] = [Format::Text, Format::OpenMetrics, Format::Protobuf];

impl Format {
    /// Picks the format the `Accept` header prefers. A format's quality is that of the most
    /// specific media range that matches it (`text/plain` before `text/*` before `*/*`); the
    /// highest quality above zero wins, then the range named more specifically, then the one
    /// listed first. Ranges must name a version we serve when they give one
    /// (`text/plain;version=0.0.4`, `application/openmetrics-text;version=1.0.0` or `0.0.1`), and
    /// protobuf needs `proto=io.prometheus.client.MetricFamily;encoding=delimited`.
    pub(crate) fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        // Per format: (quality in thousandths, specificity, position) of its best range.
        let mut best: [Option<(u16, u8, usize)>; 3] = [None; 3];
        for (position, range) in MediaTypeList::new(accept).enumerate() {
            let Ok(range) = range else { continue };
            let Some(q) = quality(range.get_param(names::Q).as_ref().map(|v| v.as_str())) else {
                continue;
            };
            for (slot, format) in best.iter_mut().zip(FORMATS) {
                let Some(specificity) = format.matched_by(&range) else {
                    continue;
                };
                // The most specific range decides (the first of equally specific ones).
                if slot.is_none_or(|(_, s, _)| specificity > s) {
                    *slot = Some((q, specificity, position));
                }
            }
        }
        FORMATS
            .into_iter()
            .zip(best)
            // Reversed, because max_by keeps the last of equals and ties go to our order.
            .rev()
            .filter_map(|(format, b)| b.filter(|(q, _, _)| *q > 0).map(|b| (format, b)))
            // Highest quality, then most specific, then listed first, then our order.
            .max_by(|(_, (qa, sa, pa)), (_, (qb, sb, pb))| (qa, sa).cmp(&(qb, sb)).then(pb.cmp(pa)))
            .map_or(Format::Text, |(format, _)| format)
    }

    /// How specifically `range` names this format (0 for `*/*`, 1 for `type/*`, 2 for the type,
    /// 3 for the type with its parameters), or `None` when it does not match it.
    fn matched_by(self, range: &MediaType) -> Option<u8> {
        let (ty, subty) = (range.ty.as_str(), range.subty.as_str());
        if ty == "*" {
            return (subty == "*").then_some(0);
        }
        let (my_ty, my_subty) = match self {
            Format::Text => ("text", "plain"),
            Format::OpenMetrics => ("application", "openmetrics-text"),
            Format::Protobuf => ("application", "vnd.google.protobuf"),
        };
        if !ty.eq_ignore_ascii_case(my_ty) {
            return None;
        }
        if subty == "*" {
            return Some(1);
        }
        if !subty.eq_ignore_ascii_case(my_subty) || range.suffix.is_some() {
            return None;
        }
        let param = |name: &str| {
            range
                .params
                .iter()
                .rev()
                .find(|(n, _)| n.as_str().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.unquoted_str())
        };
        let version = param("version");
        let ok = match self {
            Format::Text => version.as_deref().is_none_or(|v| v == "0.0.4"),
            Format::OpenMetrics => version
                .as_deref()
                .is_none_or(|v| v == "1.0.0" || v == "0.0.1"),
            Format::Protobuf => {
                param("proto").is_some_and(|p| p == "io.prometheus.client.MetricFamily")
                    && param("encoding").is_some_and(|e| e == "delimited")
            }
        };
        ok.then_some(if version.is_some() || self == Format::Protobuf {
            3
        } else {
            2
        })
    }

    /// The `Content-Type` of a response in this format.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Protobuf => {
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
            }
        }
    }
}

/// A q-value in thousandths: absent is 1, otherwise a number from 0 to 1 with at most three
/// decimals (RFC 9110, 12.4.2); anything else is `None`.
fn quality(q: Option<&str>) -> Option<u16> {
    let Some(q) = q else { return Some(1000) };
    let (int, frac) = q.split_once('.').unwrap_or((q, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = frac.bytes().chain(std::iter::repeat(b'0')).take(3);
    let frac = thousandths.fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
    match int {
        "0" => Some(frac),
        "1" if frac == 0 => Some(1000),
        _ => None,
    }
}

/// A content coding for the response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentCoding {
    /// Uncompressed.
    Identity,
    /// gzip.
    Gzip,
}

impl ContentCoding {
    /// Picks gzip when `Accept-Encoding` gives `gzip` (or `x-gzip`, or `*` when gzip is not
    /// named) a quality above zero and at least that of `identity` (or of `*`) where those are
    /// named; identity otherwise, also when the header refuses identity (an uncompressed answer
    /// beats none).
    pub(crate) fn negotiate(accept_encoding: Option<&str>) -> ContentCoding {
        let Some(header) = accept_encoding else {
            return ContentCoding::Identity;
        };
        let (mut gzip, mut identity, mut any) = (None, None, None);
        for element in header.split(',') {
            let mut parts = element.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("");
            let mut q = Some(1000);
            for param in parts {
                // The only parameter a coding takes is its weight.
                q = match param.split_once('=') {
                    Some((name, value)) if name.trim().eq_ignore_ascii_case("q") => {
                        q.and(quality(Some(value.trim())))
                    }
                    _ => None,
                };
            }
            let Some(q) = q else { continue };
            let slot =
                if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                    &mut gzip
                } else if coding.eq_ignore_ascii_case("identity") {
                    &mut identity
                } else if coding == "*" {
                    &mut any
                } else {
                    continue;
                };
            *slot = Some(slot.map_or(q, |old: u16| old.max(q)));
        }
        let gzip = gzip.or(any).unwrap_or(0);
        // Identity is acceptable unless refused, but prefers nothing unless it is named.
        let identity = identity.or(any).unwrap_or(0);
        if gzip > 0 && gzip >= identity {
            ContentCoding::Gzip
        } else {
            ContentCoding::Identity
        }
    }

    /// The `Content-Encoding` header value, if any.
    pub(crate) fn header_value(self) -> Option<&'static str> {
        match self {
            ContentCoding::Identity => None,
            ContentCoding::Gzip => Some("gzip"),
        }
    }
}

/// What a scrape gets: a format and a compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Negotiated {
    /// The wire format.
    pub format: Format,
    /// The compression of the body.
    pub coding: ContentCoding,
}

impl Negotiated {
    /// Negotiates both from the request's `Accept` and `Accept-Encoding` headers (`None` when
    /// absent or not visible ASCII).
    pub fn from_headers(accept: Option<&str>, accept_encoding: Option<&str>) -> Negotiated {
        Negotiated {
            format: Format::negotiate(accept),
            coding: ContentCoding::negotiate(accept_encoding),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Prometheus 2.42 sends without and with `--enable-feature=native-histograms`, and
    /// what Prometheus 3 sends by default and with `scrape_native_histograms`.
    const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const PROMETHEUS_2_NATIVE: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";
    const PROMETHEUS_3_NATIVE: &str = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

    fn f(accept: &str) -> Format {
        Format::negotiate(Some(accept))
    }

    #[test]
    fn scrapers_get_what_they_prefer() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(f(PROMETHEUS_2), Format::OpenMetrics);
        assert_eq!(f(PROMETHEUS_2_NATIVE), Format::Protobuf);
        assert_eq!(f(PROMETHEUS_3), Format::OpenMetrics);
        assert_eq!(f(PROMETHEUS_3_NATIVE), Format::Protobuf);
        assert_eq!(f("*/*"), Format::Text);
        assert_eq!(f("text/plain"), Format::Text);
        assert_eq!(f("application/openmetrics-text"), Format::OpenMetrics);
        assert_eq!(f("application/json, */*;q=0.5"), Format::Text);
    }

    #[test]
    fn q_values_decide() {
        let proto = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited";
        assert_eq!(f(&format!("{proto};q=0.4,text/plain;q=0.5")), Format::Text);
        assert_eq!(
            f(&format!("{proto};q=0.6,text/plain;q=0.5")),
            Format::Protobuf
        );
        assert_eq!(f(&format!("{proto};q=0,*/*")), Format::Text);
        assert_eq!(
            f(&format!("text/plain;q=0,{proto};q=0.001")),
            Format::Protobuf
        );
        // A more specific range overrides a wildcard, also downwards.
        assert_eq!(f("text/plain;q=0,*/*;q=1"), Format::OpenMetrics);
        assert_eq!(f("text/*;q=0.2,application/*;q=0.3"), Format::OpenMetrics);
        // Equal quality: the range named more specifically, then the one listed first.
        assert_eq!(f("*/*,application/openmetrics-text"), Format::OpenMetrics);
        assert_eq!(
            f(&format!("text/plain;version=0.0.4,{proto}")),
            Format::Text
        );
        assert_eq!(
            f(&format!("{proto},text/plain;version=0.0.4")),
            Format::Protobuf
        );
        // Everything refused: the text format all the same.
        assert_eq!(f("*/*;q=0"), Format::Text);
    }

    #[test]
    fn versions_and_parameters_must_be_ours() {
        assert_eq!(f("text/plain;version=1.0.0,*/*;q=0.1"), Format::Text);
        assert_eq!(
            f("application/openmetrics-text;version=2.0.0,text/plain;q=0.5"),
            Format::Text
        );
        assert_eq!(
            f("application/vnd.google.protobuf,text/plain;q=0.5"),
            Format::Text
        );
        assert_eq!(
            f(
                "application/vnd.google.protobuf;proto=other.Message;encoding=delimited,text/plain;q=0.5"
            ),
            Format::Text
        );
        assert_eq!(
            f("APPLICATION/OPENMETRICS-TEXT; VERSION=\"1.0.0\""),
            Format::OpenMetrics
        );
        assert_eq!(f("text/plain; charset=utf-8"), Format::Text);
    }

    #[test]
    fn malformed_elements_are_skipped() {
        for junk in [
            "",
            ",,,",
            "garbage",
            "text/",
            "/plain",
            ";q=1",
            "text/plain;q=2",
            "text/plain;q=-1",
            "text/plain;q=NaN",
            "text/plain;q=1e999",
            "text/plain;q=0.0001",
            "application/openmetrics-text;q=\"",
            "application/openmetrics-text;version=\"1.0.0",
            "\u{0}\u{7f}ÿ",
        ] {
            assert_eq!(f(junk), Format::Text, "{junk:?}");
        }
        assert_eq!(
            f("garbage, application/openmetrics-text;q=0.9, text/plain;q=bad"),
            Format::OpenMetrics
        );
        let long = "a/b;q=0.1,".repeat(2000) + "application/openmetrics-text";
        assert_eq!(f(&long), Format::OpenMetrics);
    }

    #[test]
    fn quality_values() {
        assert_eq!(quality(None), Some(1000));
        assert_eq!(quality(Some("1")), Some(1000));
        assert_eq!(quality(Some("1.000")), Some(1000));
        assert_eq!(quality(Some("0.5")), Some(500));
        assert_eq!(quality(Some("0.05")), Some(50));
        assert_eq!(quality(Some("0.")), Some(0));
        assert_eq!(quality(Some("0")), Some(0));
        for bad in ["1.5", "1.001", "2", "", ".5", "0.1234", "0.x", "-0", "+1"] {
            assert_eq!(quality(Some(bad)), None, "{bad:?}");
        }
    }

    fn c(header: &str) -> ContentCoding {
        ContentCoding::negotiate(Some(header))
    }

    #[test]
    fn gzip_when_accepted() {
        assert_eq!(ContentCoding::negotiate(None), ContentCoding::Identity);
        assert_eq!(c("gzip"), ContentCoding::Gzip); // what Prometheus sends
        assert_eq!(c("gzip, deflate, br"), ContentCoding::Gzip); // curl --compressed
        assert_eq!(c("GZIP;q=0.5"), ContentCoding::Gzip);
        assert_eq!(c("x-gzip"), ContentCoding::Gzip);
        assert_eq!(c("*"), ContentCoding::Gzip);
        assert_eq!(c("br, deflate"), ContentCoding::Identity);
        assert_eq!(c("gzip;q=0"), ContentCoding::Identity);
        assert_eq!(c("*;q=0.5, gzip;q=0"), ContentCoding::Identity);
        assert_eq!(c("gzip;q=0.5, identity"), ContentCoding::Identity);
        assert_eq!(c("gzip;q=0.5, identity;q=0.4"), ContentCoding::Gzip);
        assert_eq!(c("identity;q=0"), ContentCoding::Identity);
        assert_eq!(c("gzip;q=0, identity;q=0"), ContentCoding::Identity);
        for junk in ["", ",", ";;;", "gzip;q=x", "gzip;q", "gzip;q=1.5", "\u{0}"] {
            assert_eq!(c(junk), ContentCoding::Identity, "{junk:?}");
        }
    }
}
