//! The OpenAPI (JSON Schema 2020-12) description of the event envelope and its union of types.
//!
//! The envelope is serialized by hand (`event.rs`), so its schema is written by hand too: one
//! object schema per event type (`SessionStartedEvent`, …) holding the envelope's ten keys, the
//! type's name as the only allowed `type`, and that type's `data` — derived from the payload
//! structs of `data.rs`. `UniversalEvent` is the `oneOf` of the thirteen, discriminated by
//! `type`. Every envelope key is always present (`raw` and `native_session_id` as `null` when
//! absent), so every one is required.

use std::borrow::Cow;

use utoipa::openapi::schema::{
    Discriminator, KnownFormat, Object, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat,
    SchemaType, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use super::data::{
    AgentUnparsedData, ErrorData, ItemDeltaData, ItemEventData, PermissionData, QuestionData,
    SessionEndedData, SessionStartedData, TurnData,
};
use super::event::{EventSource, UniversalEvent};

/// The schemas a type needs in `components/schemas`, as utoipa collects them.
type Schemas = Vec<(String, RefOr<Schema>)>;

/// One event type of the union: its wire name, the name of its envelope schema, when it is
/// emitted, and its `data` schema.
struct Variant {
    event_type: &'static str,
    schema: &'static str,
    about: &'static str,
    data_name: fn() -> Cow<'static, str>,
    add_data: fn(&mut Schemas),
}

/// Adds `D`'s schema and everything it refers to.
fn add<D: ToSchema>(schemas: &mut Schemas) {
    schemas.push((D::name().into_owned(), D::schema()));
    D::schemas(schemas);
}

macro_rules! variant {
    ($ty:literal, $schema:literal, $data:ty, $about:literal) => {
        Variant {
            event_type: $ty,
            schema: $schema,
            about: $about,
            data_name: <$data as ToSchema>::name,
            add_data: add::<$data>,
        }
    };
}

/// The thirteen event types, in `docs/universal-events.md` §2 order (the same as
/// [`super::EVENT_TYPES`]).
const VARIANTS: [Variant; 13] = [
    variant!(
        "session.started",
        "SessionStartedEvent",
        SessionStartedData,
        "The session was created: always event 1, always synthetic."
    ),
    variant!(
        "session.ended",
        "SessionEndedEvent",
        SessionEndedData,
        "The session is over: terminated, or the agent failed fatally. Exactly one per ended session."
    ),
    variant!(
        "turn.started",
        "TurnStartedEvent",
        TurnData,
        "A message began a turn (synthetic, before the user item)."
    ),
    variant!(
        "turn.ended",
        "TurnEndedEvent",
        TurnData,
        "The turn is over: from the agent's `finish`, or from the daemon when the run did not finish (`metadata.status` says how)."
    ),
    variant!(
        "item.started",
        "ItemStartedEvent",
        ItemEventData,
        "An item opened (it may then get deltas)."
    ),
    variant!(
        "item.delta",
        "ItemDeltaEvent",
        ItemDeltaData,
        "A piece of streamed content of an open item."
    ),
    variant!(
        "item.completed",
        "ItemCompletedEvent",
        ItemEventData,
        "An item closed with its final content and status."
    ),
    variant!(
        "error",
        "ErrorEvent",
        ErrorData,
        "The agent reported an error; the turn goes on unless the run then fails."
    ),
    variant!(
        "permission.requested",
        "PermissionRequestedEvent",
        PermissionData,
        "The agent asks permission to act; answer with `POST …/permissions/{permission_id}/reply`."
    ),
    variant!(
        "permission.resolved",
        "PermissionResolvedEvent",
        PermissionData,
        "A permission request was answered (by the user, a standing rule or a timeout)."
    ),
    variant!(
        "question.requested",
        "QuestionRequestedEvent",
        QuestionData,
        "The agent asks the user a question; answer with `POST …/questions/{question_id}/reply` or `/reject`."
    ),
    variant!(
        "question.resolved",
        "QuestionResolvedEvent",
        QuestionData,
        "A question was answered or rejected (exactly once per request)."
    ),
    variant!(
        "agent.unparsed",
        "AgentUnparsedEvent",
        AgentUnparsedData,
        "An agent line that could not be understood; the line is the event's `raw`."
    ),
];

fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
}

/// The envelope of one event type: the ten keys of `docs/universal-events.md` §1.
fn envelope(v: &Variant) -> Object {
    let data = Ref::from_schema_name((v.data_name)());
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .title(Some(v.schema))
        .description(Some(v.about))
        .property(
            "event_id",
            string("`\"evt_\"` + `sequence`.").pattern(Some("^evt_[1-9][0-9]*$")),
        )
        .property(
            "sequence",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .minimum(Some(1))
                .description(Some(
                    "Per session, from 1, dense: every number is used exactly once.",
                )),
        )
        .property(
            "time",
            string("RFC 3339 UTC with sub-second precision.")
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .property(
            "session_id",
            string("The daemon's (client-chosen) session id."),
        )
        .property(
            "native_session_id",
            ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
                .description(Some("The agent's conversation id once known.")),
        )
        .property(
            "synthetic",
            ObjectBuilder::new()
                .schema_type(Type::Boolean)
                .description(Some("True when the daemon made the event up.")),
        )
        .property("source", Ref::from_schema_name(EventSource::name()))
        .property(
            "type",
            string("The event type; chooses the shape of `data`.")
                .enum_values(Some([v.event_type])),
        )
        .property("data", data)
        .property(
            "raw",
            ObjectBuilder::new()
                .schema_type(SchemaType::AnyValue)
                .description(Some(
                    "The agent's original line (parsed JSON, or the text of a non-JSON line); \
                 only with `includeRaw=true`, else `null`.",
                )),
        )
        .required("event_id")
        .required("sequence")
        .required("time")
        .required("session_id")
        .required("native_session_id")
        .required("synthetic")
        .required("source")
        .required("type")
        .required("data")
        .required("raw")
        .build()
}

impl PartialSchema for UniversalEvent {
    fn schema() -> RefOr<Schema> {
        let mut union = OneOfBuilder::new()
            .description(Some(
                "One recorded event: the envelope (`docs/universal-events.md` §1) around the \
                 `data` its `type` chooses (§2).",
            ))
            .discriminator(Some(Discriminator::with_mapping(
                "type",
                VARIANTS
                    .iter()
                    .map(|v| (v.event_type, format!("#/components/schemas/{}", v.schema))),
            )));
        for v in &VARIANTS {
            union = union.item(Ref::from_schema_name(v.schema));
        }
        Schema::OneOf(union.build()).into()
    }
}

impl ToSchema for UniversalEvent {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("UniversalEvent")
    }

    fn schemas(schemas: &mut Schemas) {
        add::<EventSource>(schemas);
        for v in &VARIANTS {
            schemas.push((v.schema.to_owned(), Schema::Object(envelope(v)).into()));
            (v.add_data)(schemas);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_union_has_every_event_type_in_order() {
        let types: Vec<&str> = VARIANTS.iter().map(|v| v.event_type).collect();
        assert_eq!(types, super::super::EVENT_TYPES);
    }
}
