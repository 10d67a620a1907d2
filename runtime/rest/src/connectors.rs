//! The connector endpoints of Kafka Connect's REST API, over [`headwater_engine::Engine`].
//!
//! Status codes and bodies follow Kafka Connect exactly (201 + `Location` on create, 202 for
//! pause/resume, 204 for stop/delete/task restart, 204 or 202 for restart, 200 for validate
//! even when invalid). Deliberate difference: where Kafka Connect answers 500 to a client
//! mistake (malformed JSON, unknown fields, unknown connector class, missing
//! `connector.class`), Headwater answers 400 with a message that says what to fix.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use headwater_api::{OffsetMap, Properties};
use headwater_engine::{Engine, EngineError, TargetState};
use serde_json::{json, Map, Value};

use crate::{RestError, RestState};

impl From<EngineError> for RestError {
    fn from(e: EngineError) -> Self {
        let status =
            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        RestError::new(status, e.to_string())
    }
}

fn engine(state: &RestState) -> Result<&Engine, RestError> {
    state.engine().ok_or_else(|| {
        RestError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The worker is still starting; try again shortly",
        )
    })
}

fn bad_request(message: impl Into<String>) -> RestError {
    RestError::new(StatusCode::BAD_REQUEST, message)
}

fn parse_json(body: &Bytes) -> Result<Value, RestError> {
    if body.is_empty() {
        return Err(bad_request(
            "The request body is empty; a JSON object is required",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| bad_request(format!("The request body is not valid JSON: {e}")))
}

/// A flat config object: strings as they are, numbers and booleans as their text (Kafka
/// Connect coerces them too), null rejected.
fn flat_config(value: &Value) -> Result<Properties, RestError> {
    let obj = value.as_object().ok_or_else(|| {
        bad_request("The connector configuration must be a JSON object of string values")
    })?;
    let mut out = Properties::new();
    for (k, v) in obj {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => {
                return Err(bad_request(format!(
                    "Null value can not be supplied as the configuration value (key {k})"
                )))
            }
            other => {
                return Err(bad_request(format!(
                    "The value of configuration {k} must be a string, not {other}"
                )))
            }
        };
        out.insert(k.clone(), text);
    }
    Ok(out)
}

/// `GET /connectors[?expand=status&expand=info]`.
pub async fn list(
    State(state): State<RestState>,
    uri: axum::http::Uri,
) -> Result<Response, RestError> {
    let engine = engine(&state)?;
    let expand: Vec<String> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.strip_prefix("expand="))
        .map(str::to_owned)
        .collect();
    let names = engine.connector_names().await;
    let want_status = expand.iter().any(|e| e == "status");
    let want_info = expand.iter().any(|e| e == "info");
    if !want_status && !want_info {
        return Ok(Json(names).into_response());
    }
    let mut out = Map::new();
    for name in names {
        let mut entry = Map::new();
        if want_status {
            match engine.status(&name).await {
                Ok(s) => entry.insert("status".into(), serde_json::to_value(s).unwrap_or_default()),
                Err(_) => continue,
            };
        }
        if want_info {
            match engine.connector_info(&name).await {
                Ok(i) => entry.insert("info".into(), serde_json::to_value(i).unwrap_or_default()),
                Err(_) => continue,
            };
        }
        out.insert(name, Value::Object(entry));
    }
    Ok(Json(Value::Object(out)).into_response())
}

/// `POST /connectors` with `{"name", "config", "initial_state"?}`.
pub async fn create(State(state): State<RestState>, body: Bytes) -> Result<Response, RestError> {
    let engine = engine(&state)?;
    let body = parse_json(&body)?;
    let obj = body.as_object().ok_or_else(|| {
        bad_request("The request body must be a JSON object with \"name\" and \"config\"")
    })?;
    if let Some(unknown) = obj
        .keys()
        .find(|k| !["name", "config", "initial_state"].contains(&k.as_str()))
    {
        return Err(bad_request(format!(
            "Unrecognized field \"{unknown}\": the body takes \"name\", \"config\" and \"initial_state\""
        )));
    }
    let mut config = match obj.get("config") {
        Some(c) => flat_config(c)?,
        None => Properties::new(),
    };
    let name = match obj.get("name").and_then(Value::as_str) {
        Some(n) => n.to_owned(),
        None => config
            .get("name")
            .cloned()
            .ok_or_else(|| bad_request("Connector name must be given as \"name\""))?,
    };
    if let Some(given) = config.get("name") {
        if *given != name {
            return Err(bad_request(format!(
                "Connector name configuration ({given}) doesn't match connector name in the URL ({name})"
            )));
        }
    }
    config.insert("name".into(), name.clone());
    let initial = match obj.get("initial_state") {
        None | Some(Value::Null) => TargetState::Started,
        Some(Value::String(s)) => TargetState::from_initial_state(s).ok_or_else(|| {
            bad_request(format!(
                "Invalid initial_state {s:?}: use RUNNING, PAUSED or STOPPED"
            ))
        })?,
        Some(other) => return Err(bad_request(format!("Invalid initial_state {other}"))),
    };
    let info = engine.create_connector(&name, config, initial).await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/connectors/{name}"))],
        Json(info),
    )
        .into_response())
}

pub async fn get_info(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    Ok(Json(engine(&state)?.connector_info(&name).await?).into_response())
}

pub async fn get_config(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    Ok(Json(engine(&state)?.connector_config(&name).await?).into_response())
}

/// `PUT /connectors/{name}/config` with a flat config: 201 when created, 200 when updated.
pub async fn put_config(
    State(state): State<RestState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let engine = engine(&state)?;
    let config = flat_config(&parse_json(&body)?)?;
    let (created, info) = engine.put_connector_config(&name, config).await?;
    if created {
        Ok((
            StatusCode::CREATED,
            [(header::LOCATION, format!("/connectors/{name}"))],
            Json(info),
        )
            .into_response())
    } else {
        Ok(Json(info).into_response())
    }
}

/// `PATCH /connectors/{name}/config`: `null` removes a key.
pub async fn patch_config(
    State(state): State<RestState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let engine = engine(&state)?;
    let body = parse_json(&body)?;
    let obj = body
        .as_object()
        .ok_or_else(|| bad_request("The patch must be a JSON object"))?;
    let mut patch = BTreeMap::new();
    for (k, v) in obj {
        let value = match v {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            other => {
                return Err(bad_request(format!(
                    "The value of configuration {k} must be a string, not {other}"
                )))
            }
        };
        patch.insert(k.clone(), value);
    }
    Ok(Json(engine.patch_connector_config(&name, patch).await?).into_response())
}

pub async fn status(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    Ok(Json(engine(&state)?.status(&name).await?).into_response())
}

#[derive(serde::Deserialize)]
pub struct RestartQuery {
    #[serde(default, rename = "includeTasks")]
    include_tasks: bool,
    #[serde(default, rename = "onlyFailed")]
    only_failed: bool,
}

/// `POST /connectors/{name}/restart[?includeTasks=..&onlyFailed=..]`.
pub async fn restart(
    State(state): State<RestState>,
    Path(name): Path<String>,
    Query(q): Query<RestartQuery>,
) -> Result<Response, RestError> {
    let engine = engine(&state)?;
    match engine
        .restart(&name, q.include_tasks, q.only_failed)
        .await?
    {
        Some(status) if q.include_tasks || q.only_failed => {
            Ok((StatusCode::ACCEPTED, Json(status)).into_response())
        }
        _ if q.only_failed => {
            Ok((StatusCode::ACCEPTED, Json(engine.status(&name).await?)).into_response())
        }
        _ => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

pub async fn pause(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    engine(&state)?
        .set_target(&name, TargetState::Paused)
        .await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

pub async fn resume(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    engine(&state)?
        .set_target(&name, TargetState::Started)
        .await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

pub async fn stop(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    engine(&state)?
        .set_target(&name, TargetState::Stopped)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn delete(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    engine(&state)?.delete_connector(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn tasks(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    Ok(Json(engine(&state)?.tasks(&name).await?).into_response())
}

pub async fn task_status(
    State(state): State<RestState>,
    Path((name, task)): Path<(String, u32)>,
) -> Result<Response, RestError> {
    Ok(Json(engine(&state)?.task_status(&name, task).await?).into_response())
}

pub async fn task_restart(
    State(state): State<RestState>,
    Path((name, task)): Path<(String, u32)>,
) -> Result<Response, RestError> {
    engine(&state)?.restart_task(&name, task).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn get_offsets(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    let offsets = engine(&state)?.offsets(&name).await?;
    let list: Vec<Value> = offsets
        .into_iter()
        .map(|(p, o)| json!({ "partition": p, "offset": o }))
        .collect();
    Ok(Json(json!({ "offsets": list })).into_response())
}

/// `PATCH /connectors/{name}/offsets` with `{"offsets":[{"partition":{..},"offset":{..}|null}]}`.
pub async fn patch_offsets(
    State(state): State<RestState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let engine = engine(&state)?;
    let body = parse_json(&body)?;
    let list = body
        .get("offsets")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            bad_request("Partitions / offsets need to be provided for an alter offsets request")
        })?;
    if list.is_empty() {
        return Err(bad_request(
            "Partitions / offsets need to be provided for an alter offsets request",
        ));
    }
    let mut entries = Vec::with_capacity(list.len());
    for item in list {
        let partition: OffsetMap = item
            .get("partition")
            .cloned()
            .and_then(|p| serde_json::from_value(p).ok())
            .ok_or_else(|| {
                bad_request("Each entry needs a \"partition\" object of primitive values")
            })?;
        let offset: Option<OffsetMap> = match item.get("offset") {
            None | Some(Value::Null) => None,
            Some(o) => Some(serde_json::from_value(o.clone()).map_err(|_| {
                bad_request("An \"offset\" must be an object of primitive values or null")
            })?),
        };
        entries.push((partition, offset));
    }
    engine.alter_offsets(&name, entries).await?;
    Ok(Json(json!({"message": "The Connect framework-managed offsets for this connector have been altered successfully. However, if this connector manages offsets externally, they will need to be manually altered in the system that the connector uses."})).into_response())
}

pub async fn delete_offsets(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    engine(&state)?.reset_offsets(&name).await?;
    Ok(Json(json!({"message": "The Connect framework-managed offsets for this connector have been reset successfully. However, if this connector manages offsets externally, they will need to be manually reset in the system that the connector uses."})).into_response())
}

pub async fn topics(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    let topics = engine(&state)?.active_topics(&name).await?;
    Ok(Json(json!({ name: { "topics": topics } })).into_response())
}

pub async fn reset_topics(
    State(state): State<RestState>,
    Path(name): Path<String>,
) -> Result<Response, RestError> {
    engine(&state)?.reset_active_topics(&name).await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

#[derive(serde::Deserialize)]
pub struct PluginsQuery {
    #[serde(default = "yes", rename = "connectorsOnly")]
    connectors_only: bool,
}

fn yes() -> bool {
    true
}

pub async fn plugins(
    State(state): State<RestState>,
    Query(q): Query<PluginsQuery>,
) -> Result<Response, RestError> {
    Ok(Json(engine(&state)?.plugin_infos(q.connectors_only)).into_response())
}

fn normalise(name: &str) -> &str {
    let simple = name.rsplit('.').next().unwrap_or(name);
    simple.strip_suffix("Connector").unwrap_or(simple)
}

/// `GET /connector-plugins/{plugin}/config`: the plugin's config key definitions.
pub async fn plugin_config(
    State(state): State<RestState>,
    Path(plugin): Path<String>,
) -> Result<Response, RestError> {
    let engine = engine(&state)?;
    let found = engine
        .plugins()
        .find_any(&plugin)
        .map_err(|_| RestError::new(StatusCode::NOT_FOUND, format!("Unknown plugin {plugin}.")))?;
    let def = found.config_def();
    let keys: Vec<Value> = def.keys().iter().map(|k| k.to_key_info()).collect();
    Ok(Json(keys).into_response())
}

/// `PUT /connector-plugins/{plugin}/config/validate`: 200 with `ConfigInfos`, even when invalid.
pub async fn validate(
    State(state): State<RestState>,
    Path(plugin): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let engine = engine(&state)?;
    let config = flat_config(&parse_json(&body)?)?;
    let class = config.get("connector.class").ok_or_else(|| {
        bad_request("Connector config contains no connector type: set \"connector.class\"")
    })?;
    if !normalise(class).ends_with(normalise(&plugin)) {
        return Err(bad_request(format!(
            "Included connector type {class} does not match request type {plugin}"
        )));
    }
    let validation = engine.validate(&config)?;
    Ok(Json(validation.to_config_infos(class)).into_response())
}
