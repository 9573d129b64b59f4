//! Text that no field may hold, refused at the edge for every route: the NUL character (U+0000).
//! PostgreSQL cannot store it in text (a 500 on every field it reached) and SQLite keeps it
//! where nothing else expects it; refused here with one 400, both backends answer alike and no
//! handler has to remember it.

use super::error::ApiError;
use axum::body::Body;
use axum::extract::Request;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Bodies read whole to be checked: as much as the JSON extractor takes (axum's default).
const LIMIT: usize = 2 * 1024 * 1024;

const REFUSAL: &str = "text may not contain the NUL character (U+0000)";

/// Refuses a request whose query, JSON body or form body holds a NUL character.
pub async fn refuse_nul(request: Request, next: Next) -> Response {
    if request.uri().query().is_some_and(decoded_holds_nul) {
        return ApiError::BadRequest(REFUSAL.into()).into_response();
    }
    let kind = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.to_ascii_lowercase())
        .unwrap_or_default();
    let json = kind.starts_with("application/json") || kind.contains("+json");
    let form = kind.starts_with("application/x-www-form-urlencoded");
    if !json && !form {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, LIMIT).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return (
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                axum::Json(serde_json::json!({
                    "error": "too_large",
                    "message": "the request body is too large or did not arrive whole",
                })),
            )
                .into_response()
        }
    };
    let holds_nul = if json {
        json_holds_nul(&bytes)
    } else {
        std::str::from_utf8(&bytes).is_ok_and(decoded_holds_nul)
    };
    if holds_nul {
        return ApiError::BadRequest(REFUSAL.into()).into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether a JSON text holds a NUL in any string or key (escaped as `\u0000`; a raw one is
/// not JSON and the extractor refuses it).
fn json_holds_nul(bytes: &[u8]) -> bool {
    fn walk(value: &serde_json::Value) -> bool {
        match value {
            serde_json::Value::String(s) => s.contains('\0'),
            serde_json::Value::Array(items) => items.iter().any(walk),
            serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || walk(v)),
            _ => false,
        }
    }
    // Cheap first: no escape of the form `\u0000` anywhere, no NUL in any string.
    if !bytes.windows(6).any(|w| w.eq_ignore_ascii_case(b"\\u0000")) {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(bytes).is_ok_and(|v| walk(&v))
}

/// Whether URL-encoded text (`a=b&c=%00`) decodes to anything with a NUL.
fn decoded_holds_nul(text: &str) -> bool {
    text.contains('\0')
        || form_urlencoded::parse(text.as_bytes())
            .any(|(k, v)| k.contains('\0') || v.contains('\0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_anywhere_in_json_or_a_query_is_found_and_look_alikes_are_not() {
        assert!(json_holds_nul(br#"{"note":"a\u0000b"}"#));
        assert!(json_holds_nul(br#"{"list":[{"x":"\u0000"}]}"#));
        assert!(json_holds_nul(br#"{"\u0000key":1}"#));
        assert!(
            !json_holds_nul(br#"{"note":"a\\u0000b"}"#),
            "an escaped backslash"
        );
        assert!(!json_holds_nul(br#"{"note":"plain"}"#));
        assert!(decoded_holds_nul("actor=a%00b"));
        assert!(decoded_holds_nul("x=1&user=%00"));
        assert!(!decoded_holds_nul("user=ada&from=2026-01-01T00%3A00%3A00Z"));
    }
}
