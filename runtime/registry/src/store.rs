//! The registry's records in the compacted topic `_schemas` (one partition), in the spirit of
//! Confluent's own `_schemas` topic: JSON keys and values, the latest record per key wins.
//!
//! - `{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}` ->
//!   `{"subject":S,"version":V,"id":ID,"schema":TEXT,"deleted":BOOL}` (a tombstone when the
//!   version is deleted permanently);
//! - `{"keytype":"CONFIG","subject":S|null,"magic":0}` -> `{"compatibilityLevel":LEVEL}` (a
//!   tombstone when the setting is removed);
//! - `{"keytype":"ID","magic":0}` -> `{"next_id":N}`, written before permanent deletes.
//!
//! Records are written uncompressed, outside transactions, and made durable with [`sync`]
//! before the registry answers; [`load`] replays every committed record in offset order.

use headwater_log::batch::{BatchBuilder, Compression, ProducerFields};
use headwater_log::{Isolation, Log, LogError, TopicConfig};
use serde_json::{json, Value as Json};

use crate::compat::CompatibilityLevel;
use crate::{State, SubjectVersion};

/// The internal topic holding the registry.
pub const SCHEMAS_TOPIC: &str = "_schemas";

fn schema_key(subject: &str, version: i32) -> String {
    json!({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}).to_string()
}

fn config_key(subject: Option<&str>) -> String {
    json!({"keytype": "CONFIG", "subject": subject, "magic": 0}).to_string()
}

fn append(log: &Log, key: &str, value: Option<&Json>) -> Result<(), LogError> {
    let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
    let bytes = value.map(|v| v.to_string().into_bytes());
    b.append(
        headwater_log::log::now_ms(),
        Some(key.as_bytes()),
        bytes.as_deref(),
        &[],
    );
    log.append_builder(SCHEMAS_TOPIC, 0, b)?;
    Ok(())
}

/// Waits until everything appended is durable.
pub fn sync(log: &Log) -> Result<(), LogError> {
    log.commit().wait()
}

/// Appends a version record without waiting for durability.
pub fn put_version_deferred(
    log: &Log,
    subject: &str,
    version: i32,
    id: i32,
    schema: &str,
    deleted: bool,
) -> Result<(), LogError> {
    let value = json!({"subject": subject, "version": version, "id": id, "schema": schema, "deleted": deleted});
    append(log, &schema_key(subject, version), Some(&value))
}

/// Writes a version record and waits until it is durable.
pub fn put_version(
    log: &Log,
    subject: &str,
    version: i32,
    id: i32,
    schema: &str,
    deleted: bool,
) -> Result<(), LogError> {
    put_version_deferred(log, subject, version, id, schema, deleted)?;
    sync(log)
}

/// Appends the tombstone of a version (call [`sync`] after).
pub fn remove_version(log: &Log, subject: &str, version: i32) -> Result<(), LogError> {
    append(log, &schema_key(subject, version), None)
}

/// Appends the next schema id to hand out, so a permanent delete of the newest schema never
/// lets its id be reused after a restart (call [`sync`] after).
pub fn put_next_id(log: &Log, next_id: i32) -> Result<(), LogError> {
    let key = json!({"keytype": "ID", "magic": 0}).to_string();
    append(log, &key, Some(&json!({"next_id": next_id})))
}

/// Appends a compatibility setting, or its removal (call [`sync`] after).
pub fn put_config(
    log: &Log,
    subject: Option<&str>,
    level: Option<CompatibilityLevel>,
) -> Result<(), LogError> {
    let value = level.map(|l| json!({"compatibilityLevel": l.name()}));
    append(log, &config_key(subject), value.as_ref())
}

/// Creates the topic if needed and rebuilds the registry's state from it.
pub(crate) fn load(log: &Log) -> Result<State, LogError> {
    log.ensure_topic(SCHEMAS_TOPIC, 1, TopicConfig::compacted())?;
    let mut st = State {
        next_id: 1,
        ..State::default()
    };
    // Latest record per key, in the order keys were last written.
    let mut offset = log.earliest_offset(SCHEMAS_TOPIC, 0)?;
    let mut records: Vec<(Json, Option<Json>)> = Vec::new();
    loop {
        let r = log.read_with(SCHEMAS_TOPIC, 0, offset, 1 << 20, Isolation::ReadCommitted)?;
        let Some(next) = r.next_offset()? else {
            break;
        };
        for rec in r.records(offset)? {
            let Some(key) = rec
                .key
                .and_then(|k| serde_json::from_slice::<Json>(&k).ok())
            else {
                continue;
            };
            let value = rec
                .value
                .and_then(|v| serde_json::from_slice::<Json>(&v).ok());
            records.push((key, value));
        }
        offset = next;
    }
    for (key, value) in records {
        match key.get("keytype").and_then(Json::as_str) {
            Some("SCHEMA") => apply_schema(&mut st, &key, value.as_ref()),
            Some("CONFIG") => {
                let subject = key.get("subject").and_then(Json::as_str);
                let level = value
                    .as_ref()
                    .and_then(|v| v.get("compatibilityLevel"))
                    .and_then(Json::as_str)
                    .and_then(CompatibilityLevel::parse);
                st.apply_level(subject, level);
            }
            Some("ID") => {
                if let Some(n) = value
                    .as_ref()
                    .and_then(|v| v.get("next_id"))
                    .and_then(Json::as_i64)
                {
                    st.next_id = st.next_id.max(n as i32);
                }
            }
            _ => {}
        }
    }
    for versions in st.subjects.values_mut() {
        versions.sort_by_key(|v| v.version);
    }
    Ok(st)
}

fn apply_schema(st: &mut State, key: &Json, value: Option<&Json>) {
    let (Some(subject), Some(version)) = (
        key.get("subject").and_then(Json::as_str),
        key.get("version").and_then(Json::as_i64),
    ) else {
        return;
    };
    let version = version as i32;
    let versions = st.subjects.entry(subject.to_owned()).or_default();
    versions.retain(|v| v.version != version);
    let Some(value) = value else {
        if versions.is_empty() {
            st.subjects.remove(subject);
        }
        return;
    };
    let (Some(id), Some(schema)) = (
        value.get("id").and_then(Json::as_i64),
        value.get("schema").and_then(Json::as_str),
    ) else {
        return;
    };
    let id = id as i32;
    versions.push(SubjectVersion {
        version,
        id,
        deleted: value
            .get("deleted")
            .and_then(Json::as_bool)
            .unwrap_or(false),
    });
    st.add_schema(id, schema.to_owned());
}
