//! Log browsing for users and tests: topics, their partitions' offsets, and records.
//!
//! Record keys and values are embedded as JSON when the bytes are JSON, else as
//! `{"base64": "..."}`; header values as strings when UTF-8, else the same base64 object.
//! Reads are read_committed unless `isolation=read_uncommitted` is asked for.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use headwater_log::{Isolation, LogError};
use serde_json::{json, Value};

use crate::{RestError, RestState};

fn log_error(e: LogError) -> RestError {
    match e {
        LogError::UnknownTopic(t) => {
            RestError::new(StatusCode::NOT_FOUND, format!("Topic {t} not found"))
        }
        LogError::UnknownPartition { topic, partition } => RestError::new(
            StatusCode::NOT_FOUND,
            format!("Topic {topic} has no partition {partition}"),
        ),
        e @ LogError::OffsetOutOfRange { .. } => {
            RestError::new(StatusCode::BAD_REQUEST, e.to_string())
        }
        other => RestError::new(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}

fn engine(state: &RestState) -> Result<&headwater_engine::Engine, RestError> {
    state.engine().ok_or_else(|| {
        RestError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The worker is still starting; try again shortly",
        )
    })
}

/// `GET /topics`.
pub async fn list(State(state): State<RestState>) -> Result<Response, RestError> {
    let log = engine(&state)?.log();
    let topics: Vec<Value> = log
        .topics()
        .into_iter()
        .map(|name| {
            json!({
                "name": name,
                "partitions": log.partition_count(&name).unwrap_or(0),
                "configs": log.topic_config(&name).map(|c| c.to_kafka_configs()).unwrap_or_default(),
            })
        })
        .collect();
    Ok(Json(topics).into_response())
}

/// `GET /topics/{topic}`.
pub async fn describe(
    State(state): State<RestState>,
    Path(topic): Path<String>,
) -> Result<Response, RestError> {
    let log = engine(&state)?.log();
    let count = log
        .partition_count(&topic)
        .ok_or_else(|| RestError::new(StatusCode::NOT_FOUND, format!("Topic {topic} not found")))?;
    let mut partitions = Vec::with_capacity(count as usize);
    for p in 0..count {
        partitions.push(json!({
            "partition": p,
            "earliest_offset": log.earliest_offset(&topic, p).map_err(log_error)?,
            "latest_offset": log.latest_offset(&topic, p).map_err(log_error)?,
            "last_stable_offset": log.last_stable_offset(&topic, p).map_err(log_error)?,
        }));
    }
    Ok(Json(json!({
        "name": topic,
        "partitions": partitions,
        "configs": log.topic_config(&topic).map(|c| c.to_kafka_configs()).unwrap_or_default(),
    }))
    .into_response())
}

#[derive(serde::Deserialize)]
pub struct RecordsQuery {
    offset: Option<i64>,
    max: Option<usize>,
    isolation: Option<String>,
}

fn embed(bytes: Option<&[u8]>) -> Value {
    match bytes {
        None => Value::Null,
        Some(b) => serde_json::from_slice::<Value>(b)
            .unwrap_or_else(|_| json!({ "base64": BASE64.encode(b) })),
    }
}

/// `GET /topics/{topic}/partitions/{p}/records?offset=N&max=M&isolation=...`.
pub async fn records(
    State(state): State<RestState>,
    Path((topic, partition)): Path<(String, u32)>,
    Query(q): Query<RecordsQuery>,
) -> Result<Response, RestError> {
    let log = engine(&state)?.log();
    let isolation = match q.isolation.as_deref() {
        None | Some("read_committed") => Isolation::ReadCommitted,
        Some("read_uncommitted") => Isolation::ReadUncommitted,
        Some(other) => {
            return Err(RestError::new(
                StatusCode::BAD_REQUEST,
                format!("isolation must be read_committed or read_uncommitted, not {other}"),
            ))
        }
    };
    let max = q.max.unwrap_or(100).clamp(1, 10_000);
    let mut offset = match q.offset {
        Some(o) => o,
        None => log.earliest_offset(&topic, partition).map_err(log_error)?,
    };
    let mut out = Vec::new();
    let mut high_watermark = log.latest_offset(&topic, partition).map_err(log_error)?;
    while out.len() < max {
        let r = log
            .read_with(&topic, partition, offset, 1 << 20, isolation)
            .map_err(log_error)?;
        high_watermark = r.high_watermark;
        let Some(next) = r.next_offset().map_err(log_error)? else {
            break;
        };
        for rec in r.records(offset).map_err(log_error)? {
            if out.len() == max {
                break;
            }
            offset = rec.offset + 1;
            let headers: Vec<Value> = rec
                .headers
                .iter()
                .map(|(k, v)| {
                    let value = match v {
                        None => Value::Null,
                        Some(b) => match std::str::from_utf8(b) {
                            Ok(s) => Value::String(s.to_owned()),
                            Err(_) => json!({ "base64": BASE64.encode(b) }),
                        },
                    };
                    json!({ "key": k, "value": value })
                })
                .collect();
            out.push(json!({
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "key": embed(rec.key.as_deref()),
                "value": embed(rec.value.as_deref()),
                "headers": headers,
            }));
        }
        if out.len() < max {
            offset = offset.max(next);
        }
    }
    Ok(
        Json(json!({ "records": out, "next_offset": offset, "high_watermark": high_watermark }))
            .into_response(),
    )
}
