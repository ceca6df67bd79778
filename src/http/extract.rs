//! Request extractors whose rejections are problem documents (malformed JSON, wrong shapes,
//! missing content type, bodies over the limit, bad query strings, bad path segments).

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::problem::Problem;

/// A JSON body; rejections keep axum's status (400, 413, 415, 422) with the parser's message.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_problem(rejection)),
        }
    }
}

fn json_problem(rejection: JsonRejection) -> Problem {
    let status = rejection.status();
    let kind = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "payload_too_large"
    } else {
        "invalid_request"
    };
    Problem::new(kind, status, rejection.body_text())
}

/// A query string; a bad one is a 400 problem.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(query_problem(rejection)),
        }
    }
}

fn query_problem(rejection: QueryRejection) -> Problem {
    Problem::invalid(rejection.body_text())
}

/// Path parameters; a segment that cannot be decoded (e.g. `%FF`, not UTF-8) is a 400 problem.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(rejection) => Err(path_problem(rejection)),
        }
    }
}

fn path_problem(rejection: PathRejection) -> Problem {
    Problem::new("invalid_request", rejection.status(), rejection.body_text())
}

/// An optional JSON body: an empty body is `T::default()`, anything else must parse.
pub struct OptionalJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJson<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| Problem::new("payload_too_large", e.status(), e.body_text()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        serde_json::from_slice(&bytes)
            .map(OptionalJson)
            .map_err(|e| Problem::invalid(format!("invalid JSON body: {e}")))
    }
}
