//! Our metric model and its encodings for scrapes.
//!
//! Collectors build [`Family`] values fresh on every scrape; [`encode`] writes them in the wire
//! format the scraper prefers ([`Negotiated`], from its `Accept` and `Accept-Encoding` headers):
//! the Prometheus text format 0.0.4, OpenMetrics 1.0, or the protobuf format
//! (`io.prometheus.client.MetricFamily`, length-delimited), the only one that carries native
//! histograms; gzip-compressed when the scraper accepts it. The model is deliberately small and
//! cheap to build: label names are static strings and a label set is an `Arc<[Label]>` that every
//! sample of a device or target shares, so a scrape of hundreds of devices allocates per device,
//! not per sample. Nothing outside this module knows about wire formats: collectors, the
//! scheduler and the engine see only [`Family`] and [`Value`].

mod family;
mod negotiate;
mod protobuf;
mod text;

pub use family::{Family, NativeBuckets, Value, labels};
pub(crate) use family::{Labels, MetricKind, Sample};
pub use negotiate::{ContentCoding, Format, Negotiated};
pub use protobuf::proto;

/// Encodes `families` in `format` (uncompressed).
pub fn encode(families: &[Family], format: Format) -> Vec<u8> {
    match format {
        Format::Text | Format::OpenMetrics => text::encode(families, format).into_bytes(),
        Format::Protobuf => protobuf::encode(families),
    }
}

/// Encodes `families` as the scraper asked: the body and how it is compressed (gzip falls back to
/// identity should compression fail).
pub fn encode_for(families: &[Family], negotiated: Negotiated) -> (Vec<u8>, ContentCoding) {
    let body = encode(families, negotiated.format);
    match negotiated.coding {
        ContentCoding::Identity => (body, ContentCoding::Identity),
        ContentCoding::Gzip => match gzip(&body) {
            Ok(compressed) => (compressed, ContentCoding::Gzip),
            Err(err) => {
                tracing::warn!(%err, "gzip failed; answering uncompressed");
                (body, ContentCoding::Identity)
            }
        },
    }
}

/// gzip at the fastest level: a scrape's text compresses about tenfold even so, and the CPU a
/// scrape costs matters more on a fleet than the last few per cent of size. Each thread keeps its
/// compressor (about 300 KB of zlib state) and resets it for every body: allocating and freeing
/// that much per scrape scattered the heap of the thread that scrapes (its RSS grew by megabytes
/// under load).
fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    use flate2::{Compress, Compression, FlushCompress, Status};
    use std::cell::RefCell;
    thread_local! {
        static COMPRESSOR: RefCell<Option<Compress>> = const { RefCell::new(None) };
    }
    COMPRESSOR.with_borrow_mut(|slot| {
        let z = slot.get_or_insert_with(|| Compress::new_gzip(Compression::fast(), 15));
        z.reset();
        let mut out = Vec::with_capacity(body.len() / 4 + 64);
        loop {
            let consumed = usize::try_from(z.total_in()).unwrap_or(usize::MAX);
            let input = body.get(consumed..).unwrap_or_default();
            // `out` always has room here (reserved below), so a call must make progress.
            let before = (z.total_in(), z.total_out());
            let result = match z.compress_vec(input, &mut out, FlushCompress::Finish) {
                Ok(Status::StreamEnd) => return Ok(out),
                Ok(_) if before == (z.total_in(), z.total_out()) => Err(std::io::Error::other(
                    "the compressor made no progress with room to write",
                )),
                Ok(_) => Ok(()),
                Err(err) => Err(std::io::Error::other(err)),
            };
            if let Err(err) = result {
                // Do not keep a stream in an unknown state for the next body.
                *slot = None;
                return Err(err);
            }
            out.reserve(out.capacity().max(4096));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_families_are_dropped() {
        let mut out = Vec::new();
        Family::gauge("a", "b").finish_into(&mut out);
        assert!(out.is_empty());
        let mut g = Family::gauge("a", "b");
        g.push(&labels(&[("x", "y")]), 1.0);
        g.finish_into(&mut out);
        let text = String::from_utf8(encode(&out, Format::Text)).unwrap();
        assert_eq!(text, "# HELP a b\n# TYPE a gauge\na{x=\"y\"} 1\n");
    }

    #[test]
    fn the_reused_compressor_gives_each_body_a_whole_gzip_stream() {
        use std::io::Read;
        // Bodies of different sizes in turn, on one thread: each must decode alone to itself
        // (nothing left over from the body before, a fresh header and trailer).
        let big: Vec<u8> = (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for body in [
            &b"a{x=\"y\"} 1\n"[..],
            &big,
            b"",
            &big[..70_000],
            b"# EOF\n",
        ] {
            let compressed = gzip(body).unwrap();
            let mut decoder = flate2::read::GzDecoder::new(&compressed[..]);
            let mut decoded = Vec::new();
            decoder.read_to_end(&mut decoded).unwrap();
            assert_eq!(decoded, body);
            let mut rest = Vec::new();
            decoder.into_inner().read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty(), "one gzip member per body");
        }
    }
}
