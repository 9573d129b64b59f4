//! Headers every answer carries for the browser's protection: no page of Lanes may be framed by
//! another site (a one-click link or an admin page under a decoy would be clickjacking), no
//! answer is sniffed into another type (a job log is text/plain, whatever it holds), and pages
//! and API answers, which carry the viewer's own data (admin pages: everyone's), are never
//! stored by a cache.

use axum::extract::Request;
use axum::http::header::{self, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

pub async fn protect(request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/");
    // A notebook frames its own pages (outputs, widgets): its own origin may, no other site.
    let session = request.uri().path().starts_with("/sessions/");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    let framing = if session { "SAMEORIGIN" } else { "DENY" };
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static(framing));
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static("frame-ancestors 'none'"));
    let html = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if api || html {
        headers
            .entry(header::CACHE_CONTROL)
            .or_insert(HeaderValue::from_static("private, no-store"));
    }
    response
}
