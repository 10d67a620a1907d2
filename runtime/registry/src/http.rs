//! The Confluent Schema Registry REST API subset served by the worker: subjects and versions,
//! schemas by id, compatibility settings and checks.
//!
//! Invariants:
//! - answers are JSON with `Content-Type: application/vnd.schemaregistry.v1+json`; errors are
//!   `{"error_code": N, "message": "..."}` with Confluent's codes (40401 subject not found,
//!   40402 version not found, 40403 schema not found, 42201 invalid schema, 42202 invalid
//!   version, 42203 invalid compatibility level, 409 incompatible, 50001 storage) and the
//!   HTTP status they imply;
//! - request bodies are read whatever their content type (clients send
//!   `application/vnd.schemaregistry.v1+json`, `application/json` or none); a body that is not
//!   the expected JSON is a 422 (42201 for schemas) or a 400, never a dropped connection;
//! - registry calls that write wait for the log to make the change durable, on a blocking
//!   thread, so the async runtime is never stalled by a disk flush.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use headwater_format::avro::registry::RegistryError;
use serde_json::{json, Value as Json};

use crate::{CompatibilityLevel, Registry, VersionSpec};

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// The registry's routes at the root (`/subjects`, `/schemas`, `/config`, `/compatibility`,
/// `/mode`), ready to merge into the worker's REST router or to serve alone.
pub fn router(registry: Registry) -> Router {
    Router::new()
        .route("/schemas/types", get(schema_types))
        .route("/schemas/ids/{id}", get(schema_by_id))
        .route("/schemas/ids/{id}/schema", get(raw_schema_by_id))
        .route("/schemas/ids/{id}/versions", get(id_versions))
        .route("/schemas/ids/{id}/subjects", get(id_subjects))
        .route("/subjects", get(list_subjects))
        .route("/subjects/{subject}", post(lookup).delete(delete_subject))
        .route(
            "/subjects/{subject}/versions",
            get(list_versions).post(register),
        )
        .route(
            "/subjects/{subject}/versions/{version}",
            get(get_version).delete(delete_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/schema",
            get(get_raw_version),
        )
        .route(
            "/subjects/{subject}/versions/{version}/referencedby",
            get(referenced_by),
        )
        .route(
            "/config",
            get(get_global_config)
                .put(put_global_config)
                .delete(delete_global_config),
        )
        .route(
            "/config/{subject}",
            get(get_subject_config)
                .put(put_subject_config)
                .delete(delete_subject_config),
        )
        .route(
            "/compatibility/subjects/{subject}/versions/{version}",
            post(check_one),
        )
        .route(
            "/compatibility/subjects/{subject}/versions",
            post(check_all),
        )
        .route("/mode", get(mode))
        .with_state(registry)
}

/// A registry answer.
struct Answer(StatusCode, Json);

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        (
            self.0,
            [(header::CONTENT_TYPE, CONTENT_TYPE)],
            self.1.to_string(),
        )
            .into_response()
    }
}

/// A registry error as an HTTP answer.
struct Failure(RegistryError);

impl From<RegistryError> for Failure {
    fn from(e: RegistryError) -> Self {
        Failure(e)
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status)
            .ok()
            .filter(|s| s.is_client_error() || s.is_server_error())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Answer(
            status,
            json!({"error_code": self.0.error_code, "message": self.0.message}),
        )
        .into_response()
    }
}

type Result<T> = std::result::Result<T, Failure>;

fn ok(json: Json) -> Result<Answer> {
    Ok(Answer(StatusCode::OK, json))
}

fn flag(query: &HashMap<String, String>, name: &str) -> bool {
    query
        .get(name)
        .is_some_and(|v| v.is_empty() || v.eq_ignore_ascii_case("true"))
}

fn parse_id(text: &str) -> Result<i32> {
    text.parse::<i32>().map_err(|_| {
        Failure(RegistryError::new(
            404,
            40403,
            format!("Schema {text} not found"),
        ))
    })
}

/// Runs a registry call that may wait for the disk on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, RegistryError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| {
            Failure(RegistryError::new(
                500,
                50001,
                format!("registry call failed: {e}"),
            ))
        })?
        .map_err(Failure)
}

/// The `schema` of a request body (`{"schema": "...", "schemaType"?, "references"?}`).
fn schema_from_body(body: &[u8]) -> Result<String> {
    let json: Json = serde_json::from_slice(body).map_err(|e| {
        Failure(RegistryError::new(
            422,
            42201,
            format!("Invalid schema: the request body is not JSON: {e}"),
        ))
    })?;
    if let Some(t) = json.get("schemaType").and_then(Json::as_str) {
        if !t.eq_ignore_ascii_case("AVRO") {
            return Err(Failure(RegistryError::new(
                422,
                42201,
                format!("Invalid schema: schemaType {t} is not supported by Headwater's registry (AVRO only)"),
            )));
        }
    }
    if json
        .get("references")
        .and_then(Json::as_array)
        .is_some_and(|r| !r.is_empty())
    {
        return Err(Failure(RegistryError::new(
            422,
            42201,
            "Invalid schema: schema references are not supported by Headwater's registry",
        )));
    }
    json.get("schema")
        .and_then(Json::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            Failure(RegistryError::new(
                422,
                42201,
                "Invalid schema: the request body has no \"schema\" string",
            ))
        })
}

fn level_from_body(body: &[u8]) -> Result<CompatibilityLevel> {
    let json: Json = serde_json::from_slice(body).map_err(|e| {
        Failure(RegistryError::new(
            422,
            42203,
            format!("Invalid compatibility level: the request body is not JSON: {e}"),
        ))
    })?;
    json.get("compatibility")
        .or_else(|| json.get("compatibilityLevel"))
        .and_then(Json::as_str)
        .and_then(CompatibilityLevel::parse)
        .ok_or_else(|| {
            Failure(RegistryError::new(
                422,
                42203,
                "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive",
            ))
        })
}

fn registered_json(r: &headwater_format::avro::registry::RegisteredSchema) -> Json {
    json!({"subject": r.subject, "version": r.version, "id": r.id, "schema": r.schema})
}

async fn schema_types() -> Result<Answer> {
    ok(json!(["AVRO"]))
}

async fn schema_by_id(State(r): State<Registry>, Path(id): Path<String>) -> Result<Answer> {
    let schema = r.schema(parse_id(&id)?)?;
    ok(json!({ "schema": schema }))
}

async fn raw_schema_by_id(State(r): State<Registry>, Path(id): Path<String>) -> Result<Answer> {
    let schema = r.schema(parse_id(&id)?)?;
    ok(serde_json::from_str(&schema).unwrap_or(Json::String(schema)))
}

async fn id_versions(State(r): State<Registry>, Path(id): Path<String>) -> Result<Answer> {
    let pairs = r.id_versions(parse_id(&id)?)?;
    ok(Json::Array(
        pairs
            .into_iter()
            .map(|(s, v)| json!({"subject": s, "version": v}))
            .collect(),
    ))
}

async fn id_subjects(State(r): State<Registry>, Path(id): Path<String>) -> Result<Answer> {
    let mut subjects: Vec<String> = r
        .id_versions(parse_id(&id)?)?
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    subjects.dedup();
    ok(json!(subjects))
}

async fn list_subjects(
    State(r): State<Registry>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Answer> {
    let mut subjects = r.subjects(flag(&q, "deleted"));
    if let Some(prefix) = q.get("subjectPrefix") {
        subjects.retain(|s| s.starts_with(prefix.as_str()));
    }
    ok(json!(subjects))
}

async fn list_versions(
    State(r): State<Registry>,
    Path(subject): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Answer> {
    ok(json!(r.versions(&subject, flag(&q, "deleted"))?))
}

async fn register(
    State(r): State<Registry>,
    Path(subject): Path<String>,
    body: Bytes,
) -> Result<Answer> {
    let schema = schema_from_body(&body)?;
    let id = blocking(move || r.register_schema(&subject, &schema)).await?;
    ok(json!({ "id": id }))
}

async fn lookup(
    State(r): State<Registry>,
    Path(subject): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Answer> {
    let schema = schema_from_body(&body)?;
    let found = r.lookup_schema(&subject, &schema, flag(&q, "deleted"))?;
    ok(registered_json(&found))
}

async fn get_version(
    State(r): State<Registry>,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Answer> {
    let spec = VersionSpec::parse(&version)?;
    ok(registered_json(&r.version(
        &subject,
        spec,
        flag(&q, "deleted"),
    )?))
}

async fn get_raw_version(
    State(r): State<Registry>,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Answer> {
    let spec = VersionSpec::parse(&version)?;
    let found = r.version(&subject, spec, flag(&q, "deleted"))?;
    ok(serde_json::from_str(&found.schema).unwrap_or(Json::String(found.schema)))
}

async fn referenced_by(
    State(r): State<Registry>,
    Path((subject, version)): Path<(String, String)>,
) -> Result<Answer> {
    let spec = VersionSpec::parse(&version)?;
    r.version(&subject, spec, false)?;
    ok(json!([]))
}

async fn delete_subject(
    State(r): State<Registry>,
    Path(subject): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Answer> {
    let permanent = flag(&q, "permanent");
    let versions = blocking(move || r.delete_subject(&subject, permanent)).await?;
    ok(json!(versions))
}

async fn delete_version(
    State(r): State<Registry>,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Answer> {
    let spec = VersionSpec::parse(&version)?;
    let permanent = flag(&q, "permanent");
    let v = blocking(move || r.delete_version(&subject, spec, permanent)).await?;
    ok(json!(v))
}

async fn get_global_config(State(r): State<Registry>) -> Result<Answer> {
    ok(json!({"compatibilityLevel": r.global_level().name()}))
}

async fn put_global_config(State(r): State<Registry>, body: Bytes) -> Result<Answer> {
    let level = level_from_body(&body)?;
    blocking(move || r.set_level(None, Some(level))).await?;
    ok(json!({"compatibility": level.name()}))
}

async fn delete_global_config(State(r): State<Registry>) -> Result<Answer> {
    let old = r.global_level();
    blocking(move || r.set_level(None, None)).await?;
    ok(json!({"compatibilityLevel": old.name()}))
}

async fn get_subject_config(
    State(r): State<Registry>,
    Path(subject): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Answer> {
    match r.subject_level(&subject) {
        Some(l) => ok(json!({"compatibilityLevel": l.name()})),
        None if flag(&q, "defaultToGlobal") => {
            ok(json!({"compatibilityLevel": r.global_level().name()}))
        }
        None => Err(Failure(RegistryError::new(
            404,
            40408,
            format!("Subject '{subject}' does not have subject-level compatibility configured"),
        ))),
    }
}

async fn put_subject_config(
    State(r): State<Registry>,
    Path(subject): Path<String>,
    body: Bytes,
) -> Result<Answer> {
    let level = level_from_body(&body)?;
    blocking(move || r.set_level(Some(&subject), Some(level))).await?;
    ok(json!({"compatibility": level.name()}))
}

async fn delete_subject_config(
    State(r): State<Registry>,
    Path(subject): Path<String>,
) -> Result<Answer> {
    let old = r.subject_level(&subject).ok_or_else(|| {
        Failure(RegistryError::new(
            404,
            40401,
            format!("Subject '{subject}' not found."),
        ))
    })?;
    blocking(move || r.set_level(Some(&subject), None)).await?;
    ok(json!({"compatibilityLevel": old.name()}))
}

fn compatibility_answer(problems: Vec<String>, verbose: bool) -> Result<Answer> {
    let mut body = json!({"is_compatible": problems.is_empty()});
    if verbose {
        body["messages"] = json!(problems);
    }
    ok(body)
}

async fn check_one(
    State(r): State<Registry>,
    Path((subject, version)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Answer> {
    let spec = VersionSpec::parse(&version)?;
    let schema = schema_from_body(&body)?;
    let problems = r.check_compatibility(&subject, Some(spec), &schema)?;
    compatibility_answer(problems, flag(&q, "verbose"))
}

async fn check_all(
    State(r): State<Registry>,
    Path(subject): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Answer> {
    let schema = schema_from_body(&body)?;
    let problems = r.check_compatibility(&subject, None, &schema)?;
    compatibility_answer(problems, flag(&q, "verbose"))
}

async fn mode() -> Result<Answer> {
    ok(json!({"mode": "READWRITE"}))
}
