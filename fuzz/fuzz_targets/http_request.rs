//! Fuzzes the HTTP request path on arbitrary bytes: the bytes are parsed as a request head (as
//! hyper does, with httparse and at most 100 headers), and what parses is routed by
//! [`server::plan`] (method, path, `Accept`/`Accept-Encoding` negotiation) and authenticated by
//! [`WebSecurity::check`] (the cached checks, then bcrypt: the `Authorization` header) without
//! panicking; the route follows from the method and path.
#![no_main]

use diskprobe_exporter::server::{self, Route};
use diskprobe_exporter::web_config::{Auth, WebSecurity};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Uri};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

const TELEMETRY_PATH: &str = "/metrics";

/// A web configuration with one basic-auth user (a cost-4 hash, so that bcrypt stays quick).
fn web() -> &'static WebSecurity {
    static WEB: OnceLock<WebSecurity> = OnceLock::new();
    WEB.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("diskprobe-fuzz-http-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("web.yml");
        std::fs::write(
            &path,
            "basic_auth_users:\n  prometheus: $2y$04$abcdefghijklmnopqrstuuWyTZ8bVv7P0GbOaH1KdhxS6o2kCRsny\n",
        )
        .expect("the web configuration written");
        let web = WebSecurity::load(&path).expect("the web configuration loads");
        let _ = std::fs::remove_dir_all(&dir);
        web
    })
}

fuzz_target!(|data: &[u8]| {
    let mut raw = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut raw);
    let Ok(httparse::Status::Complete(_)) = req.parse(data) else {
        return;
    };
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return;
    };
    // What hyper refuses with a 400 before the service sees it.
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return;
    };
    let Ok(uri) = target.parse::<Uri>() else {
        return;
    };
    let mut headers = HeaderMap::new();
    for h in req.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return;
        };
        headers.append(name, value);
    }

    let (route, head) = server::plan(&method, uri.path(), TELEMETRY_PATH, &headers);
    assert_eq!(head, method == Method::HEAD);
    if method != Method::GET && method != Method::HEAD {
        assert_eq!(route, Route::MethodNotAllowed);
    } else if uri.path() == TELEMETRY_PATH {
        assert!(matches!(route, Route::Metrics(_)));
    } else if !["/", "/-/healthy", "/-/ready"].contains(&uri.path()) {
        assert_eq!(route, Route::NotFound);
    }

    let authorization = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let web = web();
    let verdict = web.check(authorization);
    if !authorization.is_some_and(|a| a.starts_with("Basic ")) {
        assert_eq!(verdict, Auth::Denied);
    }
});
