//! The OpenAPI document (`docs/openapi.md`) against the daemon it describes.
//!
//! * The document is OpenAPI 3.1: its structure, every `$ref` resolving, every schema a valid
//!   JSON Schema 2020-12, path parameters declared, the bearer scheme, errors as problem
//!   documents, and every route of the router documented.
//! * `codebuffd openapi` prints exactly what `GET /v1/openapi.json` serves, and the security it
//!   declares is the one the daemon enforces (health open, everything else 401 without a token).
//! * The recorded transcript of every mock scenario validates against `UniversalEvent`, and so do
//!   the expected conversions of the Codebuff fixtures; live `SessionInfo`, `AgentInfo`, event
//!   pages and problem documents validate against the schemas the document gives their routes.
//! * The event schema is not a blank cheque: mutated events (an unknown type, a missing key, a
//!   wrong `data` shape, an unknown enum value, a key the daemon never writes) are rejected.
//!
//! Responses are checked strictly: every object schema with `properties` is closed
//! (`additionalProperties: false`) for the test, so a key the daemon sends but the document does
//! not describe fails too. The published document stays open for additions.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use jsonschema::Validator;
use reqwest::Method;
use serde_json::{json, Value};
use support::api::routes;
use support::daemon::{binary, Daemon, DaemonOptions, TempDir};
use support::events::of_type;

/// Generous limit for anything that waits on the daemon (the machine is shared and loaded).
const WAIT: Duration = Duration::from_secs(60);

/// The HTTP methods an OpenAPI path item may hold.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// What `codebuffd openapi` prints.
fn printed_document() -> Value {
    let out = Command::new(binary())
        .arg("openapi")
        .output()
        .expect("run codebuffd openapi");
    assert!(
        out.status.success(),
        "codebuffd openapi: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("codebuffd openapi prints JSON")
}

// ----- the document as JSON Schema ----------------------------------------------------------

/// Validators for the document's schemas, with `#/components/schemas/…` resolvable.
struct Schemas {
    doc: Value,
    /// `components/schemas`, every object schema closed (see the module comment).
    strict: Value,
}

impl Schemas {
    fn new(doc: Value) -> Schemas {
        let mut strict = doc["components"]["schemas"].clone();
        close_objects(&mut strict);
        Schemas { doc, strict }
    }

    /// A validator for `schema`, which may refer to the document's components.
    fn validator(&self, schema: &Value) -> Validator {
        let mut root = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": {"schemas": self.strict},
        });
        let (Some(root_map), Some(schema_map)) = (root.as_object_mut(), schema.as_object()) else {
            panic!("a schema object: {schema}");
        };
        root_map.extend(schema_map.clone());
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&root)
            .unwrap_or_else(|e| panic!("schema {schema} does not compile: {e}"))
    }

    /// A validator for the component schema `name`.
    fn component(&self, name: &str) -> Validator {
        assert!(
            self.doc["components"]["schemas"].get(name).is_some(),
            "the document has no schema {name}"
        );
        self.validator(&json!({"$ref": format!("#/components/schemas/{name}")}))
    }

    /// The operation `method template` (panics when the document has none).
    fn operation(&self, method: &str, template: &str) -> &Value {
        let op = &self.doc["paths"][template][method];
        assert!(op.is_object(), "the document has no {method} {template}");
        op
    }

    /// Asserts that a response (`status`, `content-type`, body) is one the document declares for
    /// `method template`: a documented status and media type, and a body its schema accepts.
    fn check_response(
        &self,
        method: &str,
        template: &str,
        status: u16,
        content_type: &str,
        body: &Value,
    ) {
        let what = format!("{method} {template} → {status}");
        let responses = &self.operation(method, template)["responses"];
        let mut response = &responses[status.to_string()];
        if !response.is_object() && status >= 400 {
            response = &responses["default"];
        }
        assert!(response.is_object(), "{what}: status not documented");
        let media = content_type.split(';').next().unwrap_or("").trim();
        let schema = &response["content"][media]["schema"];
        assert!(
            schema.is_object(),
            "{what}: media type `{media}` not documented: {response}"
        );
        let validator = self.validator(schema);
        assert_valid(&validator, body, &what);
    }
}

/// Asserts that `e` is a valid event; on failure, also says why against the schema its
/// `type` names (a `oneOf` alone only says that no branch matched).
fn assert_event(schemas: &Schemas, event: &Validator, e: &Value, what: &str) {
    if event.is_valid(e) {
        return;
    }
    let mapping =
        &schemas.doc["components"]["schemas"]["UniversalEvent"]["discriminator"]["mapping"];
    match e["type"].as_str().and_then(|t| mapping[t].as_str()) {
        Some(variant) => assert_valid(&schemas.validator(&json!({ "$ref": variant })), e, what),
        None => assert_valid(event, e, what),
    }
}

/// Closes every object schema that lists its `properties` and says nothing of others.
fn close_objects(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("properties").is_some_and(Value::is_object)
                && !map.contains_key("additionalProperties")
            {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            for child in map.values_mut() {
                close_objects(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// Asserts that `instance` is valid, listing every error.
fn assert_valid(validator: &Validator, instance: &Value, what: &str) {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not validate:\n  {}\ninstance: {}",
        errors.join("\n  "),
        cut(&instance.to_string(), 2000)
    );
}

fn cut(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

// ----- the document itself ------------------------------------------------------------------

/// Every `$ref` in `v`, with where it was found.
fn refs<'v>(v: &'v Value, at: String, out: &mut Vec<(String, &'v str)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if k == "$ref" {
                    if let Some(r) = child.as_str() {
                        out.push((at.clone(), r));
                    }
                } else {
                    refs(child, format!("{at}/{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                refs(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Every object schema with `properties` in `v` (itself or nested), with where it is.
fn objects(v: &Value, at: String) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    match v {
        Value::Object(map) => {
            if map.get("properties").is_some_and(Value::is_object) {
                out.push((at.clone(), v));
            }
            for (k, child) in map {
                out.extend(objects(child, format!("{at}/{k}")));
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                out.extend(objects(child, format!("{at}/{i}")));
            }
        }
        _ => {}
    }
    out
}

/// True when a property schema admits `null` (`type: [.., "null"]` or a `null` branch).
fn nullable(schema: &Value) -> bool {
    let null_type = |s: &Value| {
        s["type"] == "null"
            || s["type"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("null")))
    };
    null_type(schema)
        || ["oneOf", "anyOf"]
            .iter()
            .filter_map(|k| schema[k].as_array())
            .flatten()
            .any(null_type)
}

/// The `{name}`s of a path template.
fn template_params(template: &str) -> BTreeSet<&str> {
    template
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

/// The template of the document's paths that `path` is an instance of.
fn template_of<'d>(doc: &'d Value, path: &str) -> Option<&'d str> {
    let segments: Vec<&str> = path.split('/').collect();
    doc["paths"].as_object()?.keys().find_map(|template| {
        let t: Vec<&str> = template.split('/').collect();
        let fits = t.len() == segments.len()
            && t.iter()
                .zip(&segments)
                .all(|(t, s)| t == s || (t.starts_with('{') && t.ends_with('}')));
        fits.then_some(template.as_str())
    })
}

/// Every operation of the document: `(method, template, operation)`.
fn operations(doc: &Value) -> Vec<(&'static str, &str, &Value)> {
    let mut out = Vec::new();
    for (template, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                out.push((method, template.as_str(), op));
            }
        }
    }
    out
}

#[test]
fn the_document_is_valid_openapi_3_1() {
    let doc = printed_document();
    let version = doc["openapi"].as_str().expect("openapi");
    assert!(version.starts_with("3.1."), "OpenAPI {version}");
    assert_eq!(doc["info"]["title"], "codebuffd");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(doc["info"]["license"]["name"].is_string());

    // Every reference resolves inside the document.
    let mut found = Vec::new();
    refs(&doc, String::new(), &mut found);
    assert!(found.len() > 50, "{} references", found.len());
    for (at, r) in &found {
        let pointer = r
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{at}: external reference {r}"));
        assert!(doc.pointer(pointer).is_some(), "{at}: dangling {r}");
    }

    // Every schema is a valid JSON Schema 2020-12 (the dialect of OpenAPI 3.1) and compiles
    // (patterns are valid regular expressions, …).
    let schemas = Schemas::new(doc.clone());
    let components = doc["components"]["schemas"].as_object().expect("schemas");
    for (name, schema) in components {
        if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
            panic!("schema {name} is not valid JSON Schema 2020-12: {e}");
        }
        schemas.component(name);
    }
    for name in [
        "UniversalEvent",
        "SessionInfo",
        "AgentInfo",
        "Problem",
        "Health",
        "EventPage",
        "Cost",
    ] {
        assert!(components.contains_key(name), "no schema {name}");
    }

    // The token: an HTTP bearer scheme, required everywhere but where auth.rs lets anyone in.
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["type"],
        "http"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(doc["security"], json!([{"bearer": []}]));

    let mut operation_ids = BTreeSet::new();
    for (method, template, op) in operations(&doc) {
        let what = format!("{method} {template}");
        let id = op["operationId"].as_str().unwrap_or_default();
        assert!(
            operation_ids.insert(id.to_owned()),
            "{what}: operationId `{id}` missing or repeated"
        );
        // Path parameters: exactly the template's, each required.
        let declared: BTreeSet<&str> = op["parameters"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|p| p["in"] == "path")
            .map(|p| {
                assert_eq!(p["required"], true, "{what}: path parameter {p}");
                p["name"].as_str().unwrap_or_default()
            })
            .collect();
        assert_eq!(
            declared,
            template_params(template),
            "{what}: path parameters"
        );
        // Responses: some, each with a description; errors are problem documents.
        let responses = op["responses"].as_object().expect("responses");
        assert!(!responses.is_empty(), "{what}: no responses");
        for (status, response) in responses {
            assert!(
                response["description"].is_string(),
                "{what} {status}: description"
            );
            let error = status == "default" || status.parse::<u16>().expect("a status") >= 400;
            if error && template != "/v1/health" {
                assert_eq!(
                    response["content"]["application/problem+json"]["schema"]["$ref"],
                    "#/components/schemas/Problem",
                    "{what} {status}: errors are problem documents"
                );
            }
        }
        if let Some(security) = op.get("security") {
            for requirement in security.as_array().expect("security list") {
                for scheme in requirement.as_object().expect("requirement").keys() {
                    assert!(
                        doc["components"]["securitySchemes"].get(scheme).is_some(),
                        "{what}: unknown security scheme {scheme}"
                    );
                }
            }
        } else {
            assert!(responses.contains_key("401"), "{what}: 401 not documented");
        }
    }
    assert_eq!(
        doc["paths"]["/v1/health"]["get"]["security"],
        json!([{}]),
        "health needs no token"
    );

    // In what the daemon answers, a key is either always written (required, maybe nullable) or
    // left out when it has no value (optional, never null): optional-and-nullable would be a
    // description that matches no serializer setting (see `src/universal/mod.rs`).
    let mut reachable = BTreeSet::new();
    let mut todo: Vec<String> = Vec::new();
    for (_, _, op) in operations(&doc) {
        let mut found = Vec::new();
        refs(&op["responses"], String::new(), &mut found);
        todo.extend(found.into_iter().map(|(_, r)| r.to_owned()));
    }
    while let Some(r) = todo.pop() {
        let Some(name) = r.strip_prefix("#/components/schemas/") else {
            continue;
        };
        if reachable.insert(name.to_owned()) {
            let mut found = Vec::new();
            refs(&components[name], String::new(), &mut found);
            todo.extend(found.into_iter().map(|(_, r)| r.to_owned()));
        }
    }
    for name in &reachable {
        for (at, object) in objects(&components[name], name.clone()) {
            let required: BTreeSet<&str> = object["required"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            for (key, property) in object["properties"].as_object().expect("properties") {
                assert!(
                    required.contains(key.as_str()) || !nullable(property),
                    "{at}.{key}: optional and nullable (always written? `required = true`; \
                     skipped when absent? `nullable = false`)"
                );
            }
        }
    }

    // Every route the router serves is documented.
    for (method, path, _) in routes("s") {
        let template =
            template_of(&doc, &path).unwrap_or_else(|| panic!("{method} {path} not documented"));
        schemas.operation(&method.as_str().to_ascii_lowercase(), template);
    }
}

#[tokio::test]
async fn the_daemon_serves_the_printed_document_and_enforces_its_security() {
    let printed = printed_document();
    let d = Daemon::start_with(DaemonOptions {
        token: Some("openapi-token".into()),
        ..Default::default()
    });
    let resp = d.get("/v1/openapi.json").await;
    assert_eq!(resp.status(), 200);
    let served: Value = resp.json().await.expect("JSON");
    assert_eq!(served, printed, "GET /v1/openapi.json = codebuffd openapi");

    // Without a token: the open paths answer, every other operation is the documented 401.
    let schemas = Schemas::new(printed.clone());
    for (method, template, op) in operations(&printed) {
        let path = template
            .split('/')
            .map(|seg| if seg.starts_with('{') { "x" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).expect("method");
        let resp = d
            .http
            .request(method.clone(), d.url(&path))
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let open = op["security"] == json!([{}]);
        if open {
            assert_ne!(status, 401, "{method} {path} needs no token");
            continue;
        }
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body: Value = resp.json().await.expect("a problem document");
        assert_eq!(status, 401, "{method} {path} without a token: {body}");
        schemas.check_response(
            &method.as_str().to_ascii_lowercase(),
            template,
            401,
            &content_type,
            &body,
        );
    }
    d.stop();
}

// ----- events ---------------------------------------------------------------------------------

/// A valid `item.completed`, for the negative checks.
fn sample_event() -> Value {
    json!({
        "event_id": "evt_7",
        "sequence": 7,
        "time": "2026-01-01T00:00:00.000000Z",
        "session_id": "s",
        "native_session_id": "native-1",
        "synthetic": false,
        "source": "agent",
        "type": "item.completed",
        "data": {"item": {
            "item_id": "itm_3",
            "native_item_id": "call-1",
            "parent_id": null,
            "kind": "tool_call",
            "role": "assistant",
            "content": [
                {"type": "tool_call", "name": "write_file", "arguments": "{}", "call_id": "call-1"},
                {"type": "file_ref", "path": "a.txt", "action": "write", "diff": null}
            ],
            "status": "completed"
        }},
        "raw": null
    })
}

#[test]
fn the_event_schema_rejects_what_the_daemon_never_sends() {
    let schemas = Schemas::new(printed_document());
    let event = schemas.component("UniversalEvent");
    let valid = sample_event();
    assert_event(&schemas, &event, &valid, "the sample event");

    type Mutation = (&'static str, fn(&mut Value));
    let mutations: [Mutation; 12] = [
        ("an unknown type", |e| e["type"] = json!("item.paused")),
        ("a missing envelope key", |e| {
            e.as_object_mut().map(|m| m.remove("sequence"));
        }),
        ("a `raw` left out", |e| {
            e.as_object_mut().map(|m| m.remove("raw"));
        }),
        ("another type's data", |e| e["type"] = json!("turn.started")),
        ("a bad event id", |e| e["event_id"] = json!("event-7")),
        ("sequence 0", |e| e["sequence"] = json!(0)),
        ("a time that is no time", |e| e["time"] = json!("yesterday")),
        ("an unknown source", |e| e["source"] = json!("user")),
        ("an unknown item kind", |e| {
            e["data"]["item"]["kind"] = json!("thought")
        }),
        ("an item without status", |e| {
            e["data"]["item"]
                .as_object_mut()
                .map(|m| m.remove("status"));
        }),
        ("an unknown content part", |e| {
            e["data"]["item"]["content"][0]["type"] = json!("video")
        }),
        ("a key no event has", |e| {
            e["data"]["item"]["colour"] = json!("red")
        }),
    ];
    for (what, mutate) in mutations {
        let mut bad = valid.clone();
        mutate(&mut bad);
        assert!(!event.is_valid(&bad), "{what} is accepted: {bad}");
    }
}

#[test]
fn the_expected_conversions_of_every_fixture_validate() {
    let schemas = Schemas::new(printed_document());
    let event = schemas.component("UniversalEvent");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/universal");
    let mut files = 0;
    let mut types = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("fixtures/universal") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).expect("read fixture");
        for (i, line) in text.lines().enumerate() {
            let e: Value = serde_json::from_str(line).expect("JSON line");
            types.insert(e["type"].as_str().unwrap_or_default().to_owned());
            assert_event(
                &schemas,
                &event,
                &e,
                &format!("{}:{}", path.display(), i + 1),
            );
        }
    }
    assert!(files >= 20, "{files} fixtures");
    assert!(types.len() >= 10, "{types:?}");
}

/// The mock agent's scenario words, read from its source (`Scenario::select`).
fn mock_scenarios() -> BTreeSet<String> {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/agent/mock/scenario.rs"),
    )
    .expect("read the mock's scenarios");
    source
        .lines()
        .filter_map(|l| {
            let (word, rest) = l.trim().strip_prefix('"')?.split_once('"')?;
            rest.trim_start()
                .starts_with("=> Scenario::")
                .then(|| word.to_owned())
        })
        .collect()
}

/// The prompt each scenario is played with, and the session settings it needs.
fn scenario_session(word: &str) -> (String, Value) {
    match word {
        "flood" => ("flood 200".into(), json!({})),
        "spend" => ("spend 3".into(), json!({})),
        // Stopped by the session's turn timeout.
        "hang" => ("hang".into(), json!({"timeoutSeconds": 1})),
        // Asks before each action.
        "gated" => ("gated".into(), json!({"permissionMode": "default"})),
        "default" => ("tell me something".into(), json!({})),
        _ => (format!("{word} hello"), json!({})),
    }
}

/// Plays one scenario in session `id` up to its `turn.ended`, answering what it asks.
async fn play(d: &Daemon, id: String, word: &str, dir: &Path) {
    let id = id.as_str();
    let (prompt, extra) = scenario_session(word);
    let mut body = json!({"agent": "mock", "directory": dir.display().to_string()});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    d.create(id, body).await;
    d.message(id, &prompt).await;
    match word {
        "ask" => {
            let events = d
                .wait_for(id, WAIT, |e| e["type"] == "question.requested")
                .await;
            let qid = of_type(&events, "question.requested")[0]["data"]["question_id"]
                .as_str()
                .expect("question id")
                .to_owned();
            let resp = d
                .post(
                    &format!("/v1/sessions/{id}/questions/{qid}/reply"),
                    json!({"answers": [["vitest"], ["unit", "e2e"]]}),
                )
                .await;
            assert_eq!(resp.status(), 204);
        }
        "gated" => {
            for (n, reply) in [(1, "once"), (2, "reject")] {
                let pid = permission_request(d, id, n).await;
                let resp = d
                    .post(
                        &format!("/v1/sessions/{id}/permissions/{pid}/reply"),
                        json!({ "reply": reply }),
                    )
                    .await;
                assert_eq!(resp.status(), 204);
            }
        }
        _ => {}
    }
    d.wait_turns_ended(id, 1).await;
}

/// Waits for the `n`th `permission.requested` of session `id`; returns its permission id.
async fn permission_request(d: &Daemon, id: &str, n: usize) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let events = d.events(id).await;
        if let Some(e) = of_type(&events, "permission.requested").get(n - 1) {
            return e["data"]["permission_id"]
                .as_str()
                .expect("permission id")
                .to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no permission request {n} in {id}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The response's status, media type and JSON body.
async fn answer(resp: reqwest::Response) -> (u16, String, Value) {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = resp.json().await.expect("a JSON body");
    (status, content_type, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mock_scenario_and_live_response_validates_against_the_document() {
    let scenarios = mock_scenarios();
    let played: BTreeSet<String> = [
        "echo",
        "stream",
        "reasoning",
        "tools",
        "subagent",
        "ask",
        "error",
        "fail",
        "crash",
        "hang",
        "garbage",
        "huge",
        "flood",
        "escape",
        "gated",
        "run",
        "spend",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(
        scenarios, played,
        "the mock's scenarios changed: play the new ones here"
    );

    let schemas = Schemas::new(printed_document());
    let event = schemas.component("UniversalEvent");
    let d = Daemon::start();
    let dir = TempDir::new("openapi");
    let mut words: Vec<&str> = played.iter().map(String::as_str).collect();
    words.push("default");
    futures_util::future::join_all(
        words
            .iter()
            .map(|w| play(&d, format!("s-{w}"), w, dir.path())),
    )
    .await;

    // Live answers, while sessions exist: SessionInfo, the session list, the agents.
    let info = "/v1/sessions/{id}";
    for w in &words {
        let (status, ct, body) = answer(d.get(&format!("/v1/sessions/s-{w}")).await).await;
        schemas.check_response("get", info, status, &ct, &body);
        assert_eq!(status, 200, "{body}");
    }
    let (status, ct, body) = answer(d.get("/v1/sessions").await).await;
    schemas.check_response("get", "/v1/sessions", status, &ct, &body);
    assert_eq!(body["sessions"].as_array().map(Vec::len), Some(words.len()));
    let (status, ct, body) = answer(d.get("/v1/agents").await).await;
    schemas.check_response("get", "/v1/agents", status, &ct, &body);
    assert_eq!(body["agents"].as_array().map(Vec::len), Some(2), "{body}");
    for (path, template) in [
        ("/v1/agents/mock/modes", "/v1/agents/{agent}/modes"),
        ("/v1/agents/mock/models", "/v1/agents/{agent}/models"),
        ("/v1/health", "/v1/health"),
    ] {
        let (status, ct, body) = answer(d.get(path).await).await;
        schemas.check_response("get", template, status, &ct, &body);
    }

    // Every session ends, then its whole recorded transcript is checked, event by event.
    for w in &words {
        let resp = d.post_empty(&format!("/v1/sessions/s-{w}/terminate")).await;
        assert_eq!(resp.status(), 204);
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for w in &words {
        let id = format!("s-{w}");
        d.wait_for(&id, WAIT, |e| e["type"] == "session.ended")
            .await;
        let resp = d
            .get(&format!("/v1/sessions/{id}/events.jsonl?includeRaw=true"))
            .await;
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.expect("transcript");
        let mut n = 0;
        for (i, line) in text.lines().enumerate() {
            let e: Value = serde_json::from_str(line).expect("a JSON line");
            assert_event(
                &schemas,
                &event,
                &e,
                &format!("scenario `{w}`, event {}", i + 1),
            );
            *seen
                .entry(e["type"].as_str().unwrap_or_default().to_owned())
                .or_default() += 1;
            n += 1;
        }
        assert!(n >= 5, "scenario `{w}` recorded {n} events");
        // The poll answer (without `raw`) and SessionInfo of an ended session.
        let (status, ct, body) =
            answer(d.get(&format!("/v1/sessions/{id}/events?limit=50")).await).await;
        schemas.check_response("get", "/v1/sessions/{id}/events", status, &ct, &body);
        let (status, ct, body) = answer(d.get(&format!("/v1/sessions/{id}")).await).await;
        schemas.check_response("get", info, status, &ct, &body);
        assert_eq!(body["status"], "ended", "{body}");
    }
    let types: BTreeSet<&str> = seen.keys().map(String::as_str).collect();
    let all: BTreeSet<&str> = codebuffd::universal::EVENT_TYPES.into_iter().collect();
    assert_eq!(types, all, "every event type was recorded: {seen:?}");

    // Problem documents, as the document declares them.
    let (status, ct, body) = answer(d.get("/v1/sessions/nope").await).await;
    assert_eq!(status, 404);
    schemas.check_response("get", info, status, &ct, &body);
    let (status, ct, body) =
        answer(d.post("/v1/sessions/new", json!({"agent": "nope"})).await).await;
    assert_eq!(status, 400);
    schemas.check_response("post", info, status, &ct, &body);
    let (status, ct, body) = answer(
        d.post(
            "/v1/sessions/s-echo/messages",
            json!({"message": "echo after the end"}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400, "{body}");
    schemas.check_response("post", "/v1/sessions/{id}/messages", status, &ct, &body);
    d.stop();
}
