//! The browser's client for the REST API: JSON in, JSON out, and a failure as the message the
//! API gave (`{error, message}`), ready to show next to the form that caused it.
//!
//! The pages call it from event handlers and effects, which only run in the browser; the
//! server build keeps the same signatures so that the components compile for both.

use lanes_types::api::{Answered, Endpoint, Method, Sent};
use serde::de::DeserializeOwned;

/// `GET url` and read the JSON answer.
pub async fn get<T: DeserializeOwned>(url: &str) -> Result<T, String> {
    parse(request(Method::Get, url, None).await?)
}

/// Calls operation `E` (declared in `lanes_types::api`) with `params` in its path and
/// `request` as its query or JSON body, and reads its answer.
pub async fn call<E>(params: E::Params, request: &E::Request) -> Result<E::Answer, String>
where
    E: Endpoint,
    E::Answer: DeserializeOwned,
{
    let body = match E::SENT {
        Sent::Json => Some(serde_json::to_string(request).map_err(|e| e.to_string())?),
        Sent::Nothing | Sent::Query => None,
    };
    let text = self::request(E::METHOD, &E::url(&params, request), body).await?;
    match E::ANSWERED {
        Answered::Empty => parse("null".into()),
        // Straight from the text (not through `serde_json::Value`, whose deserializer the
        // bundle would then carry for every answer type).
        Answered::Text => {
            use serde::de::{value::Error, Deserialize, IntoDeserializer};
            E::Answer::deserialize(IntoDeserializer::<Error>::into_deserializer(text))
                .map_err(|error| tr!(rest.unexpected_answer, error))
        }
        Answered::Json | Answered::Upgrade => parse(text),
    }
}

fn parse<T: DeserializeOwned>(text: String) -> Result<T, String> {
    serde_json::from_str(&text).map_err(|error| tr!(rest.unexpected_answer, error))
}

/// The message to show for a failed call: the API's own words when it sent them.
pub fn error_message(status: u16, body: &str) -> String {
    match serde_json::from_str::<lanes_types::api::ErrorBody>(body) {
        Ok(error) => error.message,
        Err(_) => tr!(rest.server_answered, status),
    }
}

#[cfg(feature = "hydrate")]
async fn request(method: Method, url: &str, body: Option<String>) -> Result<String, String> {
    use gloo_net::http::RequestBuilder;
    let builder = match method {
        Method::Get => RequestBuilder::new(url).method(gloo_net::http::Method::GET),
        Method::Post => RequestBuilder::new(url).method(gloo_net::http::Method::POST),
        Method::Put => RequestBuilder::new(url).method(gloo_net::http::Method::PUT),
        Method::Patch => RequestBuilder::new(url).method(gloo_net::http::Method::PATCH),
        Method::Delete => RequestBuilder::new(url).method(gloo_net::http::Method::DELETE),
    }
    .header("Accept", "application/json");
    let response = match body {
        Some(json) => {
            builder
                .header("Content-Type", "application/json")
                .body(json)
                .map_err(|e| e.to_string())?
                .send()
                .await
        }
        None => builder.send().await,
    }
    .map_err(|_| tr!(rest.unreachable).to_string())?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if (200..300).contains(&status) {
        Ok(text)
    } else {
        Err(error_message(status, &text))
    }
}

#[cfg(not(feature = "hydrate"))]
async fn request(_: Method, _: &str, _: Option<String>) -> Result<String, String> {
    Err("the API is called from the browser, not while rendering on the server".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_show_the_apis_message_or_the_status() {
        let body = r#"{"error":"invalid","message":"password must be at least 10 characters"}"#;
        assert_eq!(
            error_message(422, body),
            "password must be at least 10 characters"
        );
        assert_eq!(
            error_message(502, "<html>Bad gateway</html>"),
            "the server answered 502"
        );
    }
}
