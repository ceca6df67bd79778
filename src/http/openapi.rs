//! `GET /v1/openapi.json` (and `codebuffd openapi`): the OpenAPI 3.1 document, generated from
//! the route annotations and the schemas of the served types (`docs/openapi.md`).
//!
//! Beyond what the annotations say, [`Conventions`] writes down what holds for every route:
//! the bearer token (global; the [`OPEN_PATHS`] need none), the 401 any other route answers
//! without it, that errors are `application/problem+json`, and a `default` problem response for
//! the errors any route may give (413, 403 from the browser guard, 503, …).

use axum::Json;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, OpenApi as Document, PathItem, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::auth::OPEN_PATHS;
use super::problem::Problem;
use super::{acp, agents, engines, events, questions, sessions, webhooks};
use crate::session::SessionInfo;
use crate::universal::UniversalEvent;

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(title = "codebuffd", description = "The Codebuff coding agent behind the sandbox-agent /v1 universal-events API."),
    paths(
        super::health,
        agents::list_agents, agents::install_agent, agents::list_modes, agents::list_models,
        engines::list_engines, sessions::list_sessions, sessions::create_session, sessions::get_session,
        sessions::delete_session,
        sessions::post_message, sessions::post_message_stream, sessions::terminate,
        sessions::cancel,
        events::poll_events, events::sse_events, events::transcript,
        questions::reply, questions::reject, questions::permission_reply,
        acp::list_servers, acp::post_envelope, acp::stream_envelopes, acp::delete_server,
        webhooks::list_deliveries,
        openapi_json,
    ),
    components(schemas(Problem, super::Health, UniversalEvent, SessionInfo, agents::AgentInfo)),
    modifiers(&Conventions),
    tags((name = "agents"), (name = "sessions"), (name = "events"), (name = "questions"),
        (name = "acp"), (name = "webhooks"))
)]
pub struct ApiDoc;

/// The name of the token's security scheme.
const BEARER: &str = "bearer";

/// The media type of problem documents.
const PROBLEM_JSON: &str = "application/problem+json";

/// Adds what every route shares; see the module comment.
struct Conventions;

impl Modify for Conventions {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The daemon's `--token`, as `Authorization: Bearer <token>` \
                         (`Token <token>`, or Basic with the token as the password, work too). \
                         A daemon started with `--no-token` asks for none.",
                    ))
                    .build(),
            ),
        );
        doc.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
        for (path, item) in doc.paths.paths.iter_mut() {
            let open = OPEN_PATHS.contains(&path.as_str());
            for op in operations(item) {
                for response in op.responses.responses.values_mut() {
                    if let RefOr::T(response) = response {
                        problems_as_problem_json(response);
                    }
                }
                if open {
                    // The empty requirement: no token needed.
                    op.security = Some(vec![SecurityRequirement::default()]);
                    continue;
                }
                let responses = &mut op.responses.responses;
                responses
                    .entry("401".to_owned())
                    .or_insert_with(|| problem("Missing or wrong token (`token_invalid`)"));
                responses.entry("default".to_owned()).or_insert_with(|| {
                    problem(
                        "Any other error (a body too large, a cross-site request, the event log \
                         unavailable, …)",
                    )
                });
            }
        }
    }
}

/// A problem-document response.
fn problem(description: &str) -> RefOr<utoipa::openapi::Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            PROBLEM_JSON,
            Content::new(Some(Ref::from_schema_name("Problem"))),
        )
        .build()
        .into()
}

/// `GET /v1/health`'s `status`: `ok` or `degraded`.
pub(super) fn health_status() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["ok", "degraded"]))
        .description(Some(
            "`ok`, or `degraded` while the event log cannot be written.",
        ))
        .build()
}

/// Every operation of a path.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// Serves problem documents under their own media type, as [`Problem`] responses do.
fn problems_as_problem_json(response: &mut utoipa::openapi::Response) {
    let content = &mut response.content;
    let is_problem = |c: &Content| matches!(&c.schema, Some(RefOr::Ref(r)) if r.ref_location == "#/components/schemas/Problem");
    if content.get("application/json").is_some_and(is_problem) {
        if let Some(c) = content.shift_remove("application/json") {
            content.insert(PROBLEM_JSON.to_owned(), c);
        }
    }
}

#[utoipa::path(get, path = "/v1/openapi.json", tag = "agents",
    responses((status = 200, description = "This document (OpenAPI 3.1)", body = Object)))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
