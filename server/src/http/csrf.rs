//! Cross-site request forgery defence for every state-changing request, in the manner of Go's
//! `http.CrossOriginProtection`: a browser tells where a request comes from (`Sec-Fetch-Site`,
//! else `Origin`); a cross-site unsafe request is refused. Requests with neither header do not
//! come from a browser, so they cannot carry a forged cookie. SameSite=Lax cookies are the
//! second line.

use super::ApiError;
use axum::extract::Request;
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub async fn protect(request: Request, next: Next) -> Response {
    if is_cross_site_write(request.method(), request.headers()) {
        return ApiError::Forbidden("cross-site request refused".into()).into_response();
    }
    next.run(request).await
}

/// Whether a request must be refused as a possible forgery. A websocket upgrade counts as a
/// write: it is a GET, but a page on another site could otherwise open one with the user's
/// cookie and read what it streams (the browser always sends its `Origin`).
pub fn is_cross_site_write(method: &Method, headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(axum::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) && !upgrade {
        return false;
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = header("sec-fetch-site") {
        return !matches!(site, "same-origin" | "none");
    }
    match (header("origin"), header("host")) {
        (Some(origin), Some(host)) => {
            let origin_host = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            origin_host != Some(host)
        }
        (Some(_), None) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn reads_are_never_refused() {
        let h = headers(&[("sec-fetch-site", "cross-site")]);
        assert!(!is_cross_site_write(&Method::GET, &h));
    }

    #[test]
    fn a_cross_site_write_from_a_browser_is_refused() {
        for pairs in [
            &[("sec-fetch-site", "cross-site")][..],
            &[("sec-fetch-site", "same-site")][..],
            &[
                ("origin", "https://evil.example"),
                ("host", "lanes.lab:3000"),
            ][..],
            &[("origin", "null"), ("host", "lanes.lab:3000")][..],
        ] {
            assert!(
                is_cross_site_write(&Method::POST, &headers(pairs)),
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn a_websocket_from_another_origin_is_refused_and_one_from_this_origin_passes() {
        let foreign = headers(&[
            ("upgrade", "websocket"),
            ("origin", "https://evil.example"),
            ("host", "lanes.lab:3000"),
        ]);
        assert!(is_cross_site_write(&Method::GET, &foreign));
        let own = headers(&[
            ("upgrade", "websocket"),
            ("origin", "http://lanes.lab:3000"),
            ("host", "lanes.lab:3000"),
        ]);
        assert!(!is_cross_site_write(&Method::GET, &own));
        let script = headers(&[("upgrade", "websocket"), ("host", "lanes.lab:3000")]);
        assert!(!is_cross_site_write(&Method::GET, &script));
    }

    #[test]
    fn same_origin_writes_and_non_browser_clients_pass() {
        for pairs in [
            &[("sec-fetch-site", "same-origin")][..],
            &[("sec-fetch-site", "none")][..],
            &[
                ("origin", "http://lanes.lab:3000"),
                ("host", "lanes.lab:3000"),
            ][..],
            &[("host", "lanes.lab:3000")][..],
        ] {
            assert!(
                !is_cross_site_write(&Method::DELETE, &headers(pairs)),
                "{pairs:?}"
            );
        }
    }
}
