//! `headwater-registry`: the worker's embedded schema registry, a Confluent Schema Registry for
//! Avro schemas kept in the worker's own log.
//!
//! - [`Registry`] holds subjects, versions, global schema ids and compatibility settings, and
//!   implements the Avro converter's [`SchemaRegistry`] so converters in the worker call it
//!   directly;
//! - [`http::router`] serves the Confluent REST API subset clients and converters use;
//! - [`compat`] checks compatibility with Avro's schema resolution rules.
//!
//! Invariants:
//! - every change is appended to the compacted topic `_schemas` (one partition) and is durable
//!   before the call returns; at start the topic is replayed, so subjects, versions, ids and
//!   settings survive restarts and ids are never reused;
//! - a schema id names one schema text for ever: registering the same schema (compared as
//!   parsed JSON) under any subject returns the same id; registering a schema already in the
//!   subject returns its id without a new version;
//! - versions of a subject count up from 1 and never repeat, also after soft deletes; a
//!   soft-deleted version is hidden unless asked for (`deleted=true`) and takes no part in
//!   compatibility checks; a permanent delete (after a soft one) removes the record;
//! - only Avro schemas are accepted (no references); a schema that does not parse is refused
//!   with 422/42201 and nothing is stored.

pub mod compat;
pub mod http;
mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use headwater_format::avro::registry::{RegisteredSchema, RegistryError, SchemaRegistry};
use headwater_log::Log;
use serde_json::Value as Json;

pub use compat::CompatibilityLevel;
pub use store::SCHEMAS_TOPIC;

/// One version of a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectVersion {
    pub version: i32,
    pub id: i32,
    pub deleted: bool,
}

/// Everything the registry knows, rebuilt from `_schemas` at start.
#[derive(Debug, Default)]
struct State {
    /// Global id -> schema text (compact JSON).
    schemas: BTreeMap<i32, String>,
    /// Subject -> versions in order.
    subjects: BTreeMap<String, Vec<SubjectVersion>>,
    /// Global compatibility (None: the default, BACKWARD).
    global: Option<CompatibilityLevel>,
    /// Subject-level compatibility.
    subject_levels: BTreeMap<String, CompatibilityLevel>,
    /// [`canonical_text`] of each schema -> its id (equal schemas share an id).
    by_canonical: HashMap<String, i32>,
    next_id: i32,
}

impl State {
    fn id_of(&self, canonical: &str) -> Option<i32> {
        self.by_canonical.get(canonical).copied()
    }

    /// Records the text of schema `id` (the first text stays, as ids never change meaning).
    fn add_schema(&mut self, id: i32, text: String) {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.schemas.entry(id) {
            if let Ok(parsed) = serde_json::from_str::<Json>(&text) {
                self.by_canonical
                    .entry(canonical_text(&parsed))
                    .or_insert(id);
            }
            slot.insert(text);
        }
        self.next_id = self.next_id.max(id + 1);
    }

    /// Sets (or with `None` removes) the global or a subject's level.
    fn apply_level(&mut self, subject: Option<&str>, level: Option<CompatibilityLevel>) {
        match (subject, level) {
            (None, l) => self.global = l,
            (Some(s), Some(l)) => {
                self.subject_levels.insert(s.to_owned(), l);
            }
            (Some(s), None) => {
                self.subject_levels.remove(s);
            }
        }
    }

    /// A subject's versions, when it has any (live ones unless `include_deleted`).
    fn subject_versions(
        &self,
        subject: &str,
        include_deleted: bool,
    ) -> Result<&Vec<SubjectVersion>, RegistryError> {
        self.subjects
            .get(subject)
            .filter(|v| include_deleted || v.iter().any(|v| !v.deleted))
            .ok_or_else(|| subject_not_found(subject))
    }

    fn level(&self, subject: &str) -> CompatibilityLevel {
        self.subject_levels
            .get(subject)
            .copied()
            .or(self.global)
            .unwrap_or_default()
    }

    /// Drops a schema text no version refers to any more (as a restart would).
    fn forget_unused(&mut self, id: i32) {
        if !self.subjects.values().flatten().any(|v| v.id == id) {
            self.schemas.remove(&id);
            self.by_canonical.retain(|_, v| *v != id);
        }
    }

    fn live_versions(&self, subject: &str) -> Vec<&SubjectVersion> {
        self.subjects
            .get(subject)
            .map(|v| v.iter().filter(|v| !v.deleted).collect())
            .unwrap_or_default()
    }
}

/// A schema's JSON with every object's keys sorted: equal schemas written with their keys in
/// different orders get one text (arrays, such as a record's fields, keep their order).
fn canonical_text(json: &Json) -> String {
    fn sorted(json: &Json) -> Json {
        match json {
            Json::Object(o) => {
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                Json::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&o[k])))
                        .collect(),
                )
            }
            Json::Array(a) => Json::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(json).to_string()
}

/// The embedded schema registry (cheap to clone).
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    log: Log,
    state: Mutex<State>,
}

/// A version selector: a number or the latest live one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSpec {
    Latest,
    Number(i32),
}

impl VersionSpec {
    /// `latest`, `-1` or 1..=2^31-1 (Confluent's rules), else 422/42202.
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        if text == "latest" || text == "-1" {
            return Ok(VersionSpec::Latest);
        }
        match text.parse::<i32>() {
            Ok(n) if n >= 1 => Ok(VersionSpec::Number(n)),
            _ => Err(RegistryError::new(
                422,
                42202,
                format!("The specified version '{text}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""),
            )),
        }
    }
}

fn subject_not_found(subject: &str) -> RegistryError {
    RegistryError::new(404, 40401, format!("Subject '{subject}' not found."))
}

fn version_not_found(version: VersionSpec) -> RegistryError {
    match version {
        VersionSpec::Number(n) => RegistryError::new(404, 40402, format!("Version {n} not found.")),
        VersionSpec::Latest => RegistryError::new(404, 40402, "Version latest not found."),
    }
}

fn storage_error(e: impl std::fmt::Display) -> RegistryError {
    RegistryError::new(500, 50001, format!("Error in the backend data store: {e}"))
}

/// A schema posted by a client, validated.
struct Candidate {
    /// Compact JSON, as stored and served.
    text: String,
    canonical: String,
    avro: apache_avro::Schema,
}

fn parse_candidate(schema: &str) -> Result<Candidate, RegistryError> {
    let parsed: Json = serde_json::from_str(schema).map_err(|e| {
        RegistryError::new(
            422,
            42201,
            format!("Invalid schema {schema}: not JSON: {e}"),
        )
    })?;
    let avro = apache_avro::Schema::parse(&parsed)
        .map_err(|e| RegistryError::new(422, 42201, format!("Invalid schema {schema}: {e}")))?;
    Ok(Candidate {
        text: parsed.to_string(),
        canonical: canonical_text(&parsed),
        avro,
    })
}

impl Registry {
    /// Opens the registry on `log`, creating `_schemas` if needed and replaying it.
    pub fn open(log: Log) -> Result<Self, RegistryError> {
        let state = store::load(&log).map_err(storage_error)?;
        Ok(Registry {
            inner: Arc::new(Inner {
                log,
                state: Mutex::new(state),
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `POST /subjects/{subject}/versions`: the id of `schema` under `subject`, registering a
    /// new version when the subject does not hold it yet (after the compatibility check).
    pub fn register_schema(&self, subject: &str, schema: &str) -> Result<i32, RegistryError> {
        let candidate = parse_candidate(schema)?;
        let mut st = self.state();
        let existing_id = st.id_of(&candidate.canonical);
        if let Some(id) = existing_id {
            if st.live_versions(subject).iter().any(|v| v.id == id) {
                return Ok(id);
            }
        }
        let level = st.level(subject);
        let previous: Vec<(i32, String)> = st
            .live_versions(subject)
            .iter()
            .map(|v| (v.version, st.schemas[&v.id].clone()))
            .collect();
        let problems = compat::check(level, &candidate.avro, &previous);
        if !problems.is_empty() {
            return Err(RegistryError::new(
                409,
                409,
                format!(
                    "Schema being registered is incompatible with an earlier schema for subject \"{subject}\", details: [{}]",
                    problems.join(", ")
                ),
            ));
        }
        let id = match existing_id {
            Some(id) => id,
            None => st.next_id.max(1),
        };
        let version = st
            .subjects
            .get(subject)
            .and_then(|v| v.last())
            .map_or(1, |v| v.version + 1);
        store::put_version(
            &self.inner.log,
            subject,
            version,
            id,
            &candidate.text,
            false,
        )
        .map_err(storage_error)?;
        st.add_schema(id, candidate.text);
        st.subjects
            .entry(subject.to_owned())
            .or_default()
            .push(SubjectVersion {
                version,
                id,
                deleted: false,
            });
        Ok(id)
    }

    /// `POST /subjects/{subject}`: the version of `subject` holding `schema`.
    pub fn lookup_schema(
        &self,
        subject: &str,
        schema: &str,
        include_deleted: bool,
    ) -> Result<RegisteredSchema, RegistryError> {
        let st = self.state();
        let versions = st.subject_versions(subject, include_deleted)?;
        let candidate = parse_candidate(schema)?;
        let id = st
            .id_of(&candidate.canonical)
            .ok_or_else(|| RegistryError::new(404, 40403, "Schema not found"))?;
        let v = versions
            .iter()
            .rev()
            .find(|v| v.id == id && (include_deleted || !v.deleted))
            .ok_or_else(|| RegistryError::new(404, 40403, "Schema not found"))?;
        Ok(RegisteredSchema {
            subject: subject.to_owned(),
            version: v.version,
            id,
            schema: st.schemas[&id].clone(),
        })
    }

    /// `GET /subjects/{subject}/versions/{version}`.
    pub fn version(
        &self,
        subject: &str,
        version: VersionSpec,
        include_deleted: bool,
    ) -> Result<RegisteredSchema, RegistryError> {
        let st = self.state();
        let versions = st.subject_versions(subject, include_deleted)?;
        let found = match version {
            VersionSpec::Latest => versions
                .iter()
                .rev()
                .find(|v| include_deleted || !v.deleted),
            VersionSpec::Number(n) => versions
                .iter()
                .find(|v| v.version == n && (include_deleted || !v.deleted)),
        }
        .ok_or_else(|| version_not_found(version))?;
        Ok(RegisteredSchema {
            subject: subject.to_owned(),
            version: found.version,
            id: found.id,
            schema: st.schemas[&found.id].clone(),
        })
    }

    /// `GET /subjects` (sorted).
    pub fn subjects(&self, include_deleted: bool) -> Vec<String> {
        let st = self.state();
        st.subjects
            .iter()
            .filter(|(_, v)| include_deleted || v.iter().any(|v| !v.deleted))
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// `GET /subjects/{subject}/versions`.
    pub fn versions(
        &self,
        subject: &str,
        include_deleted: bool,
    ) -> Result<Vec<i32>, RegistryError> {
        let st = self.state();
        let versions: Vec<i32> = st
            .subjects
            .get(subject)
            .map(|v| {
                v.iter()
                    .filter(|v| include_deleted || !v.deleted)
                    .map(|v| v.version)
                    .collect()
            })
            .unwrap_or_default();
        if versions.is_empty() {
            return Err(subject_not_found(subject));
        }
        Ok(versions)
    }

    /// `GET /schemas/ids/{id}`.
    pub fn schema(&self, id: i32) -> Result<String, RegistryError> {
        self.state()
            .schemas
            .get(&id)
            .cloned()
            .ok_or_else(|| RegistryError::new(404, 40403, format!("Schema {id} not found")))
    }

    /// `GET /schemas/ids/{id}/versions`: the (subject, version) pairs holding an id.
    pub fn id_versions(&self, id: i32) -> Result<Vec<(String, i32)>, RegistryError> {
        let st = self.state();
        if !st.schemas.contains_key(&id) {
            return Err(RegistryError::new(
                404,
                40403,
                format!("Schema {id} not found"),
            ));
        }
        Ok(st
            .subjects
            .iter()
            .flat_map(|(s, vs)| {
                vs.iter()
                    .filter(|v| v.id == id && !v.deleted)
                    .map(move |v| (s.clone(), v.version))
            })
            .collect())
    }

    /// `DELETE /subjects/{subject}`: soft delete (or permanent, after a soft one); returns the
    /// versions deleted.
    pub fn delete_subject(
        &self,
        subject: &str,
        permanent: bool,
    ) -> Result<Vec<i32>, RegistryError> {
        let mut st = self.state();
        let versions = st
            .subjects
            .get(subject)
            .cloned()
            .ok_or_else(|| subject_not_found(subject))?;
        let all_deleted = versions.iter().all(|v| v.deleted);
        if permanent {
            if !all_deleted {
                return Err(RegistryError::new(
                    404,
                    40405,
                    format!("Subject '{subject}' was not deleted first before being permanently deleted"),
                ));
            }
            store::put_next_id(&self.inner.log, st.next_id).map_err(storage_error)?;
            for v in &versions {
                store::remove_version(&self.inner.log, subject, v.version)
                    .map_err(storage_error)?;
            }
            if st.subject_levels.contains_key(subject) {
                store::put_config(&self.inner.log, Some(subject), None).map_err(storage_error)?;
                st.subject_levels.remove(subject);
            }
            st.subjects.remove(subject);
            store::sync(&self.inner.log).map_err(storage_error)?;
            for v in &versions {
                st.forget_unused(v.id);
            }
            return Ok(versions.iter().map(|v| v.version).collect());
        }
        if all_deleted {
            return Err(RegistryError::new(
                404,
                40404,
                format!(
                    "Subject '{subject}' was soft deleted.Set permanent=true to delete permanently"
                ),
            ));
        }
        let mut deleted = Vec::new();
        for v in versions.iter().filter(|v| !v.deleted) {
            store::put_version_deferred(
                &self.inner.log,
                subject,
                v.version,
                v.id,
                &st.schemas[&v.id],
                true,
            )
            .map_err(storage_error)?;
            deleted.push(v.version);
        }
        store::sync(&self.inner.log).map_err(storage_error)?;
        for v in st.subjects.get_mut(subject).into_iter().flatten() {
            v.deleted = true;
        }
        Ok(deleted)
    }

    /// `DELETE /subjects/{subject}/versions/{version}`: returns the version deleted.
    pub fn delete_version(
        &self,
        subject: &str,
        version: VersionSpec,
        permanent: bool,
    ) -> Result<i32, RegistryError> {
        let mut st = self.state();
        let versions = st
            .subjects
            .get(subject)
            .cloned()
            .ok_or_else(|| subject_not_found(subject))?;
        let target = match version {
            VersionSpec::Latest => versions
                .iter()
                .rev()
                .find(|v| !v.deleted || permanent)
                .cloned(),
            VersionSpec::Number(n) => versions.iter().find(|v| v.version == n).cloned(),
        }
        .ok_or_else(|| version_not_found(version))?;
        if permanent {
            if !target.deleted {
                return Err(RegistryError::new(
                    404,
                    40407,
                    format!("Subject '{subject}' Version {} was not deleted first before being permanently deleted", target.version),
                ));
            }
            store::put_next_id(&self.inner.log, st.next_id).map_err(storage_error)?;
            store::remove_version(&self.inner.log, subject, target.version)
                .map_err(storage_error)?;
            store::sync(&self.inner.log).map_err(storage_error)?;
            if let Some(vs) = st.subjects.get_mut(subject) {
                vs.retain(|v| v.version != target.version);
                if vs.is_empty() {
                    st.subjects.remove(subject);
                }
            }
            st.forget_unused(target.id);
            return Ok(target.version);
        }
        if target.deleted {
            return Err(RegistryError::new(
                404,
                40406,
                format!("Subject '{subject}' Version {} was soft deleted.Set permanent=true to delete permanently", target.version),
            ));
        }
        store::put_version(
            &self.inner.log,
            subject,
            target.version,
            target.id,
            &st.schemas[&target.id],
            true,
        )
        .map_err(storage_error)?;
        for v in st.subjects.get_mut(subject).into_iter().flatten() {
            if v.version == target.version {
                v.deleted = true;
            }
        }
        Ok(target.version)
    }

    /// The global compatibility level.
    pub fn global_level(&self) -> CompatibilityLevel {
        self.state().global.unwrap_or_default()
    }

    /// A subject's own level (`None`: not configured).
    pub fn subject_level(&self, subject: &str) -> Option<CompatibilityLevel> {
        self.state().subject_levels.get(subject).copied()
    }

    /// Sets (or with `None` removes) the global or a subject's level.
    pub fn set_level(
        &self,
        subject: Option<&str>,
        level: Option<CompatibilityLevel>,
    ) -> Result<(), RegistryError> {
        let mut st = self.state();
        store::put_config(&self.inner.log, subject, level).map_err(storage_error)?;
        store::sync(&self.inner.log).map_err(storage_error)?;
        st.apply_level(subject, level);
        Ok(())
    }

    /// `POST /compatibility/subjects/{subject}/versions[/{version}]`: the reasons `schema`
    /// is incompatible (empty: compatible) against one version, or with `None` against the
    /// versions the subject's level names.
    pub fn check_compatibility(
        &self,
        subject: &str,
        version: Option<VersionSpec>,
        schema: &str,
    ) -> Result<Vec<String>, RegistryError> {
        let candidate = parse_candidate(schema)?;
        let st = self.state();
        let level = st.level(subject);
        let live = st.live_versions(subject);
        let previous: Vec<(i32, String)> = match version {
            None => live
                .iter()
                .map(|v| (v.version, st.schemas[&v.id].clone()))
                .collect(),
            Some(spec) => {
                if live.is_empty() {
                    return Err(subject_not_found(subject));
                }
                let v = match spec {
                    VersionSpec::Latest => live.last().copied(),
                    VersionSpec::Number(n) => live.iter().find(|v| v.version == n).copied(),
                }
                .ok_or_else(|| version_not_found(spec))?;
                vec![(v.version, st.schemas[&v.id].clone())]
            }
        };
        // Against one named version, the level's direction applies to that version alone.
        let level = if version.is_some() {
            level.non_transitive()
        } else {
            level
        };
        Ok(compat::check(level, &candidate.avro, &previous))
    }
}

impl SchemaRegistry for Registry {
    fn register(
        &self,
        subject: &str,
        schema: &str,
        _normalize: bool,
    ) -> Result<i32, RegistryError> {
        self.register_schema(subject, schema)
    }

    fn lookup(
        &self,
        subject: &str,
        schema: &str,
        _normalize: bool,
    ) -> Result<RegisteredSchema, RegistryError> {
        self.lookup_schema(subject, schema, false)
    }

    fn latest(&self, subject: &str) -> Result<RegisteredSchema, RegistryError> {
        self.version(subject, VersionSpec::Latest, false)
    }

    fn schema_by_id(&self, id: i32) -> Result<String, RegistryError> {
        self.schema(id)
    }
}
