//! `headwater-connector-parquet`: a sink that writes topics as Parquet files into a directory,
//! for analytics engines (DuckDB, Spark, Trino, pandas) to read.
//!
//! `parquet.path` is a local directory (or `file://` URL) or an S3-compatible bucket
//! (`s3://bucket/prefix`, see [`bucket`]: files are staged locally and uploaded when complete).
//!
//! Layout under `parquet.path`: `<topic>/[<partition directory>/]<connector>-<task>-<p>-<first>-<last>.parquet`
//! (`task` the writing task, `p` the log partition, `first`/`last` the offsets of its first and
//! last row), and one
//! manifest per task, `_headwater/<connector>-<task>.json`, listing the complete files and the
//! next offset to consume per topic partition. So that the manifest does not grow with every
//! file ever written (it is rewritten at each commit), settled files (wholly before their
//! partition's next offset) are moved, [`ARCHIVE_BATCH`] at a time, into immutable archives
//! `_headwater/<connector>-<task>.archive-<n>.json` that the manifest names in `archives`; an
//! archive is durable before the manifest that names it, so "listed" means listed in a
//! manifest or in one of its archives.
//!
//! Invariants (exactly once, and readers see only complete files):
//! - a file is written under a `.tmp` name, fsynced, and renamed into place before the manifest
//!   that lists it is replaced (written to a temporary file, fsynced, renamed); a file is
//!   complete exactly when a manifest lists it;
//! - the manifest's next offsets cover only rows in listed files, and a restarted task resumes
//!   from them (the engine asks `stored_offsets`), so no row is lost;
//! - a listed file can hold rows past its log partition's next offset (when a file of another
//!   partition directory of that log partition, with lower offsets, is still open); a restarted
//!   task skips a record whose directory and offset a listed file covers, so no row is written
//!   twice (see `ListedAhead`);
//! - at start, a task removes its own `.tmp` files and its own files no manifest lists (left by
//!   a crash), never a sibling task's (which may be between finishing a file and listing it);
//! - memory per open file is one row group (`rows.per.row.group` rows); rows reach disk as row
//!   groups fill.
//!
//! Rows: a Debezium envelope becomes its `after` image (`before` for deletes) plus `__op`,
//! `__deleted`, `__source_ts_ms`, `__kafka_partition` and `__kafka_offset`; a flattened record
//! becomes its value plus the same columns (`__op` "u", `__source_ts_ms` null). Tombstones and
//! records without a struct value are skipped. A schema change of a row starts a new file.

pub mod bucket;
pub mod columns;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_schema::Schema as ArrowSchema;
use headwater_api::config::{
    ConfigDef, ConfigKey, ConfigType, ConfigValidation, Importance, Validator,
};
use headwater_api::plugin::BoxFuture;
use headwater_api::{
    ConnectError, Properties, SchemaRef, SinkBatch, SinkConnector, SinkRecord, SinkTask,
    SinkTaskContext, Struct, TopicPartition, Value,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use crate::bucket::{Bucket, BucketSettings};
use crate::columns::ColumnPlan;

/// The connector class name.
pub const CLASS: &str = "io.headwater.connect.parquet.ParquetSinkConnector";

pub fn config_def() -> ConfigDef {
    let key = ConfigKey::new;
    ConfigDef::new()
        .define(key("parquet.path", ConfigType::String).importance(Importance::High).validator(Validator::NonEmptyString)
            .doc("Where the files go: a local directory (or file:// URL), or an S3-compatible bucket as s3://bucket/prefix (see the parquet.s3.* settings)."))
        .define(key("parquet.s3.endpoint", ConfigType::String).default_null().importance(Importance::Medium)
            .doc("Endpoint of an S3-compatible service (MinIO, Ceph, R2, ...), e.g. http://127.0.0.1:9000; default AWS (or AWS_ENDPOINT_URL). Requests use path-style URLs unless parquet.s3.virtual.hosted.style is true."))
        .define(key("parquet.s3.region", ConfigType::String).default_null().importance(Importance::Medium)
            .doc("Region of the bucket; default AWS_REGION, else us-east-1."))
        .define(key("parquet.s3.access.key.id", ConfigType::String).default_null().importance(Importance::Medium)
            .doc("Access key id; default AWS_ACCESS_KEY_ID (or the instance's credentials)."))
        .define(key("parquet.s3.secret.access.key", ConfigType::Password).default_null().importance(Importance::Medium)
            .doc("Secret access key; default AWS_SECRET_ACCESS_KEY."))
        .define(key("parquet.s3.virtual.hosted.style", ConfigType::Boolean).default_str("false").importance(Importance::Low)
            .doc("Address the bucket as a host name (bucket.endpoint) instead of a path (endpoint/bucket)."))
        .define(key("parquet.staging.dir", ConfigType::String).default_null().importance(Importance::Low)
            .doc("With an s3:// path: the local directory files are written in before they are uploaded; default <temp dir>/headwater-parquet."))
        .define(key("partition.by", ConfigType::String).default_str("none").importance(Importance::Medium)
            .doc("Subdirectories per file: none, field:<name> (<name>=<value>/ of the row), time:day or time:hour (dt=YYYY-MM-DD[/hour=HH]/ of the record time, UTC)."))
        .define(key("flush.size", ConfigType::Long).default_str("100000").validator(Validator::at_least(1.0)).importance(Importance::Medium)
            .doc("Rows per file at most; a full file is committed."))
        .define(key("rotate.interval.ms", ConfigType::Long).default_str("60000").validator(Validator::at_least(0.0)).importance(Importance::Medium)
            .doc("A file is committed once its first row is this old (checked as records arrive and at least every poll; 0 commits after every batch)."))
        .define(key("rows.per.row.group", ConfigType::Int).default_str("16384").validator(Validator::at_least(1.0)).importance(Importance::Low)
            .doc("Rows buffered in memory per open file before they are written as a row group."))
        .define(key("parquet.compression", ConfigType::String).default_str("zstd")
            .validator(Validator::one_of_case_insensitive(&["none", "snappy", "zstd"])).importance(Importance::Low).doc("Column compression."))
}

fn validate(props: &Properties) -> ConfigValidation {
    let mut v = config_def().validate(props);
    if let Some(p) = props.get("parquet.path") {
        if let Err(e) = base_dir(p) {
            v.add_error("parquet.path", e);
        }
    }
    if let Some(e) = props.get("parquet.s3.endpoint") {
        let e = e.trim();
        if !(e.is_empty() || e.starts_with("http://") || e.starts_with("https://")) {
            v.add_error(
                "parquet.s3.endpoint",
                format!("{e:?}: expected an http:// or https:// URL"),
            );
        }
    }
    if let Some(p) = props.get("partition.by") {
        if let Err(e) = PartitionBy::parse(p) {
            v.add_error("partition.by", e);
        }
    }
    v
}

/// Where `parquet.path` points.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Destination {
    Local(PathBuf),
    /// Bucket and key prefix.
    S3(String, String),
}

fn base_dir(raw: &str) -> Result<Destination, String> {
    let raw = raw.trim();
    if let Some(rest) = raw.strip_prefix("file://") {
        return Ok(Destination::Local(PathBuf::from(rest)));
    }
    if let Some(s3) = bucket::parse_s3_url(raw) {
        return s3.map(|(b, p)| Destination::S3(b, p));
    }
    if raw.contains("://") {
        return Err(format!(
            "{raw:?}: only local directories (or file:// URLs) and S3-compatible buckets (s3://bucket/prefix) are supported; mount other object stores (gcsfuse, blobfuse, ...) and give the path"
        ));
    }
    Ok(Destination::Local(PathBuf::from(raw)))
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PartitionBy {
    None,
    Field(String),
    Day,
    Hour,
}

impl PartitionBy {
    fn parse(raw: &str) -> Result<PartitionBy, String> {
        let raw = raw.trim();
        match raw.to_ascii_lowercase().as_str() {
            "none" | "" => Ok(PartitionBy::None),
            "time:day" => Ok(PartitionBy::Day),
            "time:hour" => Ok(PartitionBy::Hour),
            _ => match raw.split_once(':') {
                Some((k, f)) if k.eq_ignore_ascii_case("field") && !f.is_empty() => {
                    Ok(PartitionBy::Field(f.to_owned()))
                }
                _ => Err(format!(
                    "partition.by {raw:?}: expected none, field:<name>, time:day or time:hour"
                )),
            },
        }
    }

    /// The subdirectory of a row (`""` for none).
    fn dir(&self, row: &Struct, timestamp_ms: i64) -> String {
        let time = || {
            jiff::Timestamp::from_millisecond(timestamp_ms)
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
                .to_zoned(jiff::tz::TimeZone::UTC)
        };
        match self {
            PartitionBy::None => String::new(),
            PartitionBy::Day => format!("dt={}", time().strftime("%Y-%m-%d")),
            PartitionBy::Hour => format!(
                "dt={}/hour={}",
                time().strftime("%Y-%m-%d"),
                time().strftime("%H")
            ),
            PartitionBy::Field(f) => {
                let v = match row.get(f) {
                    None | Some(Value::Null) => "__null__".to_owned(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => format!("{other:?}")
                        .trim_start_matches(|c: char| c.is_alphanumeric() && c != '(')
                        .trim_start_matches('(')
                        .trim_end_matches(')')
                        .to_owned(),
                };
                let safe: String = v
                    .chars()
                    .map(|c| {
                        if c.is_alphanumeric() || "-_.".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                format!("{f}={safe}")
            }
        }
    }
}

/// A complete file, as the manifest lists it (path relative to `parquet.path`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestFile {
    pub path: String,
    pub topic: String,
    pub kafka_partition: u32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub rows: u64,
}

/// One task's manifest.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub files: Vec<ManifestFile>,
    /// topic -> log partition -> next offset to consume.
    pub next_offsets: BTreeMap<String, BTreeMap<u32, i64>>,
    /// The archives holding this task's older files (paths relative to `parquet.path`, oldest
    /// first); their files are listed as surely as `files`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub archives: Vec<String>,
}

/// An archive of settled manifest entries: written once, never changed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestArchive {
    pub files: Vec<ManifestFile>,
}

/// How many settled files the manifest holds before they are moved into an archive.
pub const ARCHIVE_BATCH: usize = 1000;

/// The task whose manifest `name` is, when it is one of `connector`'s
/// (`<connector>-<task>.json`; another connector whose name merely starts the same, such as
/// `lake-eu` for `lake`, does not match).
fn manifest_task(name: &str, connector: &str) -> Option<u32> {
    let task = name
        .strip_prefix(connector)?
        .strip_prefix('-')?
        .strip_suffix(".json")?;
    if task.is_empty() || !task.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    task.parse().ok()
}

/// Every manifest of a connector under `base`, with the task that writes it.
fn read_task_manifests(base: &Path, connector: &str) -> Result<Vec<(u32, Manifest)>, String> {
    let dir = base.join("_headwater");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(out);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(task) = manifest_task(&name, connector) {
            let text = std::fs::read_to_string(e.path()).map_err(|err| format!("{name}: {err}"))?;
            let manifest = serde_json::from_str(&text).map_err(|err| format!("{name}: {err}"))?;
            out.push((task, manifest));
        }
    }
    Ok(out)
}

/// The files of `manifest`'s archives under `base`, oldest first. A missing archive is an
/// error: without it, complete files would look unlisted.
fn read_local_archives(base: &Path, manifest: &Manifest) -> Result<Vec<ManifestFile>, String> {
    let mut files = Vec::new();
    for rel in &manifest.archives {
        let text = std::fs::read_to_string(base.join(rel))
            .map_err(|err| format!("the manifest archive {rel}: {err}"))?;
        let archive: ManifestArchive =
            serde_json::from_str(&text).map_err(|err| format!("{rel}: {err}"))?;
        files.extend(archive.files);
    }
    Ok(files)
}

/// Every manifest of a connector under `base`, each with the files of its archives put
/// before its own in `files` (so `files` is every file the task has listed, oldest first).
pub fn read_manifests(base: &Path, connector: &str) -> Result<Vec<Manifest>, String> {
    read_task_manifests(base, connector)?
        .into_iter()
        .map(|(_, mut m)| {
            let mut files = read_local_archives(base, &m)?;
            files.append(&mut m.files);
            m.files = files;
            Ok(m)
        })
        .collect()
}

/// The manifests of a connector in a bucket, with their tasks (see [`read_manifests`]).
async fn read_bucket_manifests(
    bucket: &Bucket,
    connector: &str,
) -> Result<Vec<(u32, Manifest)>, ConnectError> {
    let mut out = Vec::new();
    for rel in bucket.list("_headwater").await? {
        let name = rel.rsplit('/').next().unwrap_or(&rel);
        let Some(task) = manifest_task(name, connector) else {
            continue;
        };
        if let Some(bytes) = bucket.get(&rel).await? {
            let manifest = serde_json::from_slice(&bytes)
                .map_err(|e| ConnectError::fatal(format!("{}/{rel}: {e}", bucket.url())))?;
            out.push((task, manifest));
        }
    }
    Ok(out)
}

/// The files of `manifest`'s archives in a bucket (see [`read_local_archives`]).
async fn read_bucket_archives(
    bucket: &Bucket,
    manifest: &Manifest,
) -> Result<Vec<ManifestFile>, ConnectError> {
    let mut files = Vec::new();
    for rel in &manifest.archives {
        let Some(bytes) = bucket.get(rel).await? else {
            return Err(ConnectError::fatal(format!(
                "the manifest archive {}/{rel} is missing",
                bucket.url()
            )));
        };
        let archive: ManifestArchive = serde_json::from_slice(&bytes)
            .map_err(|e| ConnectError::fatal(format!("{}/{rel}: {e}", bucket.url())))?;
        files.extend(archive.files);
    }
    Ok(files)
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> ConnectError {
    ConnectError::retriable(format!("{what} {}: {e}", path.display()))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ConnectError> {
    let tmp = path.with_extension("json.tmp");
    {
        use std::io::Write;
        let mut f = File::create(&tmp).map_err(|e| io_err("writing", &tmp, e))?;
        f.write_all(bytes).map_err(|e| io_err("writing", &tmp, e))?;
        f.sync_all().map_err(|e| io_err("syncing", &tmp, e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| io_err("renaming", &tmp, e))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

fn sync_dir(dir: &Path) -> Result<(), ConnectError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("syncing directory", dir, e))
}

/// A file being written.
struct OpenFile {
    topic: String,
    partition: u32,
    rel_dir: String,
    tmp: PathBuf,
    writer: ArrowWriter<File>,
    columns: Vec<ColumnPlan>,
    arrow: Arc<ArrowSchema>,
    /// The row schema it was opened for (rows of another schema go to a new file).
    row_schema: SchemaRef,
    pending: Vec<Vec<Value>>,
    first_offset: i64,
    last_offset: i64,
    rows: u64,
    opened: Instant,
}

/// The sink task.
#[derive(Default)]
pub struct ParquetSinkTask {
    /// The destination directory, or with a bucket the local staging directory.
    base: PathBuf,
    /// The bucket files are uploaded to (`parquet.path=s3://...`).
    bucket: Option<Bucket>,
    connector: String,
    task_id: u32,
    partition_by: Option<PartitionBy>,
    flush_size: u64,
    rotate: Duration,
    row_group: usize,
    compression: Option<Compression>,
    open: Vec<OpenFile>,
    manifest: Manifest,
    /// Per log partition, the offset consumption continues from (after the last batch).
    consumed: BTreeMap<TopicPartition, i64>,
    /// Listed files at or past the offset this task resumes from (see [`ListedAhead`]).
    listed_ahead: Vec<ListedAhead>,
    /// How many settled files the manifest holds before they go into an archive
    /// ([`ARCHIVE_BATCH`]; smaller in tests).
    archive_batch: usize,
    /// Every manifest this task wrote, for tests of the invariants.
    #[cfg(test)]
    written: Vec<Manifest>,
}

/// A listed file that holds offsets at or past the resume point of its log partition.
///
/// Files of several partition directories of one log partition can be open at once, and the
/// manifest's next offset stops at the first row of the oldest open one; so a file that was
/// committed while an older one stayed open holds rows past that next offset. A file of one
/// directory holds every row of that directory between its first and last offset, so after a
/// restart a record whose directory and offset fall in such a file is already stored and is
/// skipped: nothing is written twice.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ListedAhead {
    topic: String,
    partition: u32,
    rel_dir: String,
    first_offset: i64,
    last_offset: i64,
}

impl ListedAhead {
    /// The files of `manifests` whose last offset is at or past the offset their log
    /// partition resumes from (the highest next offset any manifest stores, as
    /// `stored_offsets` answers; all of a partition's files when none does).
    fn of(manifests: &[(u32, Manifest)]) -> Vec<ListedAhead> {
        let resume = resume_offsets(manifests);
        let mut out = Vec::new();
        for (_, m) in manifests {
            for f in &m.files {
                let from = resume
                    .get(&(f.topic.as_str(), f.kafka_partition))
                    .copied()
                    .unwrap_or(i64::MIN);
                if f.last_offset < from {
                    continue;
                }
                let topic_dir = safe_topic(&f.topic);
                let rel_dir = Path::new(&f.path)
                    .parent()
                    .and_then(|d| d.strip_prefix(&topic_dir).ok())
                    .map(|d| d.to_string_lossy().into_owned())
                    .unwrap_or_default();
                out.push(ListedAhead {
                    topic: f.topic.clone(),
                    partition: f.kafka_partition,
                    rel_dir,
                    first_offset: f.first_offset,
                    last_offset: f.last_offset,
                });
            }
        }
        out
    }
}

/// Per log partition (topic, partition), the offset a task resumes from: the highest next
/// offset any of the connector's manifests stores (a partition may have moved between tasks).
fn resume_offsets(manifests: &[(u32, Manifest)]) -> HashMap<(&str, u32), i64> {
    let mut resume: HashMap<(&str, u32), i64> = HashMap::new();
    for (_, m) in manifests {
        for (topic, parts) in &m.next_offsets {
            for (p, o) in parts {
                let e = resume.entry((topic.as_str(), *p)).or_insert(*o);
                *e = (*e).max(*o);
            }
        }
    }
    resume
}

impl ParquetSinkTask {
    /// The manifest's object key in a bucket, relative to the prefix.
    fn manifest_key(&self) -> String {
        format!("_headwater/{}-{}.json", self.connector, self.task_id)
    }

    fn manifest_path(&self) -> PathBuf {
        self.base.join(self.manifest_key())
    }

    /// Removes this connector's files that no manifest lists (and `.tmp` leftovers).
    fn remove_orphans(&self, listed: &HashSet<String>) {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        walk(&p, out);
                    } else {
                        out.push(p);
                    }
                }
            }
        }
        let mut files = Vec::new();
        walk(&self.base, &mut files);
        for f in files {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let ours = written_by_task(&name, &self.connector, self.task_id);
            if !ours || f.parent().is_some_and(|p| p.ends_with("_headwater")) {
                continue;
            }
            let rel = f
                .strip_prefix(&self.base)
                .map(|r| r.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.ends_with(".tmp") || (name.ends_with(".parquet") && !listed.contains(&rel)) {
                tracing::info!(file = %f.display(), "removing a Parquet file no manifest lists (left by a crash)");
                let _ = std::fs::remove_file(&f);
            }
        }
    }

    /// With a bucket: deletes this connector's objects no manifest lists (uploads a crash
    /// left unlisted), and empties this task's staging directory.
    /// (A free function of the parts it needs: the task itself is not `Sync`, so its
    /// futures may not hold `&self` across an await.)
    async fn remove_bucket_orphans(
        bucket: &Bucket,
        (connector, task): (&str, u32),
        staging: &Path,
        listed: &HashSet<String>,
    ) -> Result<(), ConnectError> {
        for rel in bucket.list("").await? {
            let name = rel.rsplit('/').next().unwrap_or(&rel);
            if written_by_task(name, connector, task) && !listed.contains(&rel) {
                tracing::info!(object = %format!("{}/{rel}", bucket.url()), "deleting a Parquet object no manifest lists (left by a crash)");
                bucket.delete(&rel).await?;
            }
        }
        if staging.exists() {
            std::fs::remove_dir_all(staging).map_err(|e| io_err("emptying", staging, e))?;
        }
        Ok(())
    }

    /// Every manifest of `connector` with its task, wherever the files go.
    async fn manifests(
        bucket: Option<&Bucket>,
        base: &Path,
        connector: &str,
    ) -> Result<Vec<(u32, Manifest)>, ConnectError> {
        match bucket {
            Some(b) => read_bucket_manifests(b, connector).await,
            None => read_task_manifests(base, connector).map_err(ConnectError::fatal),
        }
    }

    fn writer_props(&self) -> WriterProperties {
        WriterProperties::builder()
            .set_compression(self.compression.unwrap_or(Compression::UNCOMPRESSED))
            .set_max_row_group_row_count(Some(self.row_group))
            .build()
    }

    /// The open file for a row, opening one when needed.
    async fn file_for(
        &mut self,
        topic: &str,
        partition: u32,
        rel_dir: String,
        row_schema: &SchemaRef,
        offset: i64,
    ) -> Result<usize, ConnectError> {
        if let Some(i) = self.open.iter().position(|f| {
            f.topic == topic
                && f.partition == partition
                && f.rel_dir == rel_dir
                && (Arc::ptr_eq(&f.row_schema, row_schema) || *f.row_schema == **row_schema)
        }) {
            return Ok(i);
        }
        // Another schema for the same place: finish the old file first (rows stay in order).
        let other_schema = self
            .open
            .iter()
            .position(|f| f.topic == topic && f.partition == partition && f.rel_dir == rel_dir);
        if let Some(i) = other_schema {
            self.commit_file(i).await?;
        }
        let dir = self.base.join(safe_topic(topic)).join(&rel_dir);
        std::fs::create_dir_all(&dir).map_err(|e| io_err("creating", &dir, e))?;
        let tmp = dir.join(format!(
            ".{}-{}-{partition}-{offset}.parquet.tmp",
            self.connector, self.task_id
        ));
        let file = File::create(&tmp).map_err(|e| io_err("creating", &tmp, e))?;
        let columns = columns::plan(row_schema);
        let arrow = columns::arrow_schema(&columns);
        let writer = ArrowWriter::try_new(file, arrow.clone(), Some(self.writer_props()))
            .map_err(|e| ConnectError::fatal(format!("opening a Parquet writer: {e}")))?;
        self.open.push(OpenFile {
            topic: topic.to_owned(),
            partition,
            rel_dir,
            tmp,
            writer,
            columns,
            arrow,
            row_schema: row_schema.clone(),
            pending: Vec::new(),
            first_offset: offset,
            last_offset: offset,
            rows: 0,
            opened: Instant::now(),
        });
        Ok(self.open.len() - 1)
    }

    fn write_pending(f: &mut OpenFile) -> Result<(), ConnectError> {
        if f.pending.is_empty() {
            return Ok(());
        }
        let batch = columns::record_batch(&f.columns, &f.arrow, &f.pending)?;
        f.writer
            .write(&batch)
            .map_err(|e| ConnectError::retriable(format!("writing {}: {e}", f.tmp.display())))?;
        f.pending.clear();
        Ok(())
    }

    /// Closes, syncs and renames file `i` into place (with a bucket: uploads it and removes
    /// the staged copy) and lists it (the manifest is written by the caller).
    async fn commit_file(&mut self, i: usize) -> Result<(), ConnectError> {
        let mut f = self.open.remove(i);
        Self::write_pending(&mut f)?;
        let file = f
            .writer
            .into_inner()
            .map_err(|e| ConnectError::retriable(format!("finishing {}: {e}", f.tmp.display())))?;
        file.sync_all().map_err(|e| io_err("syncing", &f.tmp, e))?;
        drop(file);
        let name = format!(
            "{}-{}-{}-{}-{}.parquet",
            self.connector, self.task_id, f.partition, f.first_offset, f.last_offset
        );
        let dir = f.tmp.parent().map(Path::to_path_buf).unwrap_or_default();
        let dest = dir.join(&name);
        std::fs::rename(&f.tmp, &dest).map_err(|e| io_err("renaming", &f.tmp, e))?;
        sync_dir(&dir)?;
        let rel = dest
            .strip_prefix(&self.base)
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or(name);
        if let Some(bucket) = &self.bucket {
            let key = rel.replace(std::path::MAIN_SEPARATOR, "/");
            bucket.upload(&dest, &key).await?;
            std::fs::remove_file(&dest).map_err(|e| io_err("removing", &dest, e))?;
            tracing::debug!(object = %format!("{}/{key}", bucket.url()), rows = f.rows, "uploaded a Parquet file");
        }
        self.manifest.files.push(ManifestFile {
            path: rel,
            topic: f.topic,
            kafka_partition: f.partition,
            first_offset: f.first_offset,
            last_offset: f.last_offset,
            rows: f.rows,
        });
        Ok(())
    }

    /// Commits files that are full or old enough (all of them when `all`), then writes the
    /// manifest with the offsets its files cover.
    async fn commit_due(&mut self, all: bool) -> Result<(), ConnectError> {
        let mut committed = false;
        let mut i = 0;
        while i < self.open.len() {
            let due = {
                let f = &self.open[i];
                all || f.rows >= self.flush_size || f.opened.elapsed() >= self.rotate
            };
            if due {
                self.commit_file(i).await?;
                committed = true;
            } else {
                i += 1;
            }
        }
        // Next offsets: what was consumed, but not past the first row of a file still open.
        let mut next = self.manifest.next_offsets.clone();
        for (tp, consumed) in &self.consumed {
            let held = self
                .open
                .iter()
                .filter(|f| f.topic_partition_is(tp))
                .map(|f| f.first_offset)
                .min();
            let at = held.map_or(*consumed, |h| h.min(*consumed));
            let slot = next
                .entry(tp.topic.clone())
                .or_default()
                .entry(tp.partition)
                .or_insert(at);
            if at > *slot {
                *slot = at;
                committed = true;
            }
        }
        if committed {
            self.manifest.next_offsets = next;
            self.archive_settled_files().await?;
            let bytes = serde_json::to_vec_pretty(&self.manifest)
                .map_err(|e| ConnectError::fatal(e.to_string()))?;
            if let Some(bucket) = &self.bucket {
                bucket.put(&self.manifest_key(), bytes).await?;
            } else {
                let path = self.manifest_path();
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| io_err("creating", dir, e))?;
                }
                write_atomically(&path, &bytes)?;
            }
            #[cfg(test)]
            self.written.push(self.manifest.clone());
        }
        Ok(())
    }

    /// When the manifest holds at least `archive_batch` settled files (wholly before their
    /// partition's next offset, so no restart looks at them again except to know they are
    /// listed), writes them durably into a new archive and names it in the manifest instead
    /// (the caller then writes the manifest). A crash before that manifest write leaves an
    /// archive no manifest names, which the next one of the same number replaces.
    async fn archive_settled_files(&mut self) -> Result<(), ConnectError> {
        let next = &self.manifest.next_offsets;
        let settled = |f: &ManifestFile| {
            next.get(&f.topic)
                .and_then(|p| p.get(&f.kafka_partition))
                .is_some_and(|n| f.last_offset < *n)
        };
        let batch = self.archive_batch.max(1);
        if self.manifest.files.iter().filter(|f| settled(f)).count() < batch {
            return Ok(());
        }
        // The manifest changes only once the archive is durable: a failed write leaves every
        // file listed where it was (the task then stops and commits that manifest).
        let (archived, kept): (Vec<ManifestFile>, Vec<ManifestFile>) = self
            .manifest
            .files
            .iter()
            .cloned()
            .partition(|f| settled(f));
        let rel = format!(
            "_headwater/{}-{}.archive-{}.json",
            self.connector,
            self.task_id,
            self.manifest.archives.len() + 1
        );
        let bytes = serde_json::to_vec(&ManifestArchive { files: archived })
            .map_err(|e| ConnectError::fatal(e.to_string()))?;
        if let Some(bucket) = &self.bucket {
            bucket.put(&rel, bytes).await?;
        } else {
            let path = self.base.join(&rel);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| io_err("creating", dir, e))?;
            }
            write_atomically(&path, &bytes)?;
        }
        self.manifest.files = kept;
        self.manifest.archives.push(rel);
        Ok(())
    }

    async fn add(&mut self, r: SinkRecord) -> Result<(), ConnectError> {
        let Value::Struct(v) = r.value else {
            return Ok(());
        };
        let schema = v.schema().clone();
        let (row, op, source_ts) = match schema
            .field("after")
            .filter(|_| schema.field("op").is_some())
        {
            Some(after) => {
                let op = v
                    .get("op")
                    .and_then(Value::as_str)
                    .unwrap_or("u")
                    .to_owned();
                let source_ts = v
                    .get("source")
                    .and_then(Value::as_struct)
                    .and_then(|s| s.get("ts_ms"))
                    .and_then(Value::as_i64);
                let image = if op == "d" {
                    schema.field("before").map(|f| f.index())
                } else {
                    Some(after.index())
                };
                // Move the image out of the envelope instead of copying it.
                match image.map(|i| v.into_values().swap_remove(i)) {
                    Some(Value::Struct(row)) => (row, op, source_ts),
                    _ => return Ok(()),
                }
            }
            None => (v, "u".to_owned(), None),
        };
        if op == "m" || op == "t" {
            return Ok(());
        }
        let rel_dir = self
            .partition_by
            .as_ref()
            .map(|p| p.dir(&row, r.timestamp))
            .unwrap_or_default();
        if !self.listed_ahead.is_empty()
            && self.already_listed(&r.original_topic, r.partition, &rel_dir, r.offset)
        {
            return Ok(());
        }
        let schema = row.schema().clone();
        let i = self
            .file_for(&r.original_topic, r.partition, rel_dir, &schema, r.offset)
            .await?;
        let f = &mut self.open[i];
        let mut values = row.into_values();
        values.push(Value::String(op.clone()));
        values.push(Value::Boolean(op == "d"));
        values.push(source_ts.map_or(Value::Null, Value::Int64));
        values.push(Value::Int32(r.partition as i32));
        values.push(Value::Int64(r.offset));
        f.pending.push(values);
        f.rows += 1;
        f.last_offset = r.offset;
        if f.pending.len() >= self.row_group {
            Self::write_pending(f)?;
        }
        if f.rows >= self.flush_size {
            // A full file is committed in the middle of a batch: the manifest written with it
            // must cover this row, so its partition counts as consumed up to here (every
            // earlier record of the partition is in a file or was skipped). Without this the
            // manifest would list the file with the previous batch's offset, and a crash
            // before the batch's end would write these rows again after the restart.
            let tp = TopicPartition::new(r.original_topic, r.partition);
            let next = r.offset + 1;
            let at = self.consumed.entry(tp).or_insert(next);
            *at = (*at).max(next);
            self.commit_due(false).await?;
        }
        Ok(())
    }

    /// Whether a listed file already holds the record at `offset` of this log partition and
    /// directory (see [`ListedAhead`]). Offsets only grow per partition, so files that end
    /// before `offset` are forgotten.
    fn already_listed(&mut self, topic: &str, partition: u32, rel_dir: &str, offset: i64) -> bool {
        self.listed_ahead
            .retain(|f| !(f.partition == partition && f.topic == topic && f.last_offset < offset));
        self.listed_ahead.iter().any(|f| {
            f.partition == partition
                && f.topic == topic
                && f.rel_dir == rel_dir
                && f.first_offset <= offset
        })
    }
}

impl OpenFile {
    fn topic_partition_is(&self, tp: &TopicPartition) -> bool {
        self.topic == tp.topic && self.partition == tp.partition
    }
}

/// Whether `name` is a data file (or a staged `.tmp` file) that task `task` of `connector`
/// writes: `<connector>-<task>-<partition>-<first>-<last>.parquet`. A task removes only its own
/// unlisted files, so a task that restarts never deletes a file a sibling task has finished but
/// not yet listed. Files of the earlier naming without the task
/// (`<connector>-<partition>-<first>-<last>.parquet`) are task 0's to clean up.
fn written_by_task(name: &str, connector: &str, task: u32) -> bool {
    let name = name.strip_prefix('.').unwrap_or(name);
    let Some(rest) = name
        .strip_prefix(connector)
        .and_then(|r| r.strip_prefix('-'))
    else {
        return false;
    };
    let stem = rest
        .strip_suffix(".parquet.tmp")
        .or_else(|| rest.strip_suffix(".parquet"))
        .unwrap_or(rest);
    let numbers: Vec<&str> = stem.split('-').collect();
    if !numbers
        .iter()
        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    let tmp = rest.ends_with(".tmp");
    match (numbers.len(), tmp) {
        // <task>-<partition>-<first>-<last>, or staged: <task>-<partition>-<first>
        (4, false) | (3, true) => numbers[0] == task.to_string(),
        // The naming before tasks were in it.
        (3, false) | (2, true) => task == 0,
        _ => false,
    }
}

/// A topic name as a directory name.
fn safe_topic(topic: &str) -> String {
    topic
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl SinkTask for ParquetSinkTask {
    fn start(
        &mut self,
        context: SinkTaskContext,
        props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            let v = validate(&props);
            if v.error_count() > 0 {
                return Err(ConnectError::config(v.error_message()));
            }
            let p = config_def()
                .parse(&props)
                .map_err(|e| ConnectError::config(e.error_message()))?;
            self.connector = context.connector_name.clone();
            self.task_id = context.task_id;
            match base_dir(p.get_string("parquet.path").unwrap_or("."))
                .map_err(ConnectError::config)?
            {
                Destination::Local(dir) => self.base = dir,
                Destination::S3(bucket, prefix) => {
                    let settings = BucketSettings {
                        bucket,
                        prefix,
                        endpoint: p.get_string("parquet.s3.endpoint").map(str::to_owned),
                        region: p.get_string("parquet.s3.region").map(str::to_owned),
                        access_key_id: p.get_string("parquet.s3.access.key.id").map(str::to_owned),
                        secret_access_key: p
                            .get_string("parquet.s3.secret.access.key")
                            .map(str::to_owned),
                        virtual_hosted_style: p
                            .get_bool("parquet.s3.virtual.hosted.style")
                            .unwrap_or(false),
                    };
                    let staging = p
                        .get_string("parquet.staging.dir")
                        .map(PathBuf::from)
                        .unwrap_or_else(|| std::env::temp_dir().join("headwater-parquet"));
                    self.base = staging.join(format!("{}-{}", self.connector, self.task_id));
                    self.bucket = Some(Bucket::open(&settings)?);
                }
            }
            self.partition_by = Some(
                PartitionBy::parse(p.get_string("partition.by").unwrap_or("none"))
                    .map_err(ConnectError::config)?,
            );
            self.flush_size = p.get_long("flush.size").unwrap_or(100_000).max(1) as u64;
            self.rotate = Duration::from_millis(
                p.get_long("rotate.interval.ms").unwrap_or(60_000).max(0) as u64,
            );
            self.row_group = p.get_long("rows.per.row.group").unwrap_or(16_384).max(1) as usize;
            self.compression = Some(
                match p
                    .get_string("parquet.compression")
                    .unwrap_or("zstd")
                    .to_ascii_lowercase()
                    .as_str()
                {
                    "none" => Compression::UNCOMPRESSED,
                    "snappy" => Compression::SNAPPY,
                    _ => Compression::ZSTD(ZstdLevel::default()),
                },
            );
            self.archive_batch = ARCHIVE_BATCH;
            let manifests =
                Self::manifests(self.bucket.as_ref(), &self.base, &self.connector).await?;
            let mut listed: HashSet<String> = manifests
                .iter()
                .flat_map(|(_, m)| m.files.iter().map(|f| f.path.clone()))
                .collect();
            for (_, m) in &manifests {
                let archived = match &self.bucket {
                    Some(b) => read_bucket_archives(b, m).await?,
                    None => read_local_archives(&self.base, m).map_err(ConnectError::fatal)?,
                };
                listed.extend(archived.into_iter().map(|f| f.path));
            }
            if let Some(bucket) = &self.bucket {
                Self::remove_bucket_orphans(
                    bucket,
                    (&self.connector, self.task_id),
                    &self.base,
                    &listed,
                )
                .await?;
            } else {
                self.remove_orphans(&listed);
            }
            std::fs::create_dir_all(&self.base).map_err(|e| io_err("creating", &self.base, e))?;
            self.listed_ahead = ListedAhead::of(&manifests);
            if !self.listed_ahead.is_empty() {
                tracing::info!(connector = %self.connector, task = self.task_id, files = self.listed_ahead.len(), "listed Parquet files hold rows past the resume offsets; their rows are not written again");
            }
            self.manifest = manifests
                .into_iter()
                .find(|(task, _)| *task == self.task_id)
                .map(|(_, m)| m)
                .unwrap_or_default();
            let place = match &self.bucket {
                Some(b) => b.url().to_owned(),
                None => self.base.display().to_string(),
            };
            tracing::info!(connector = %self.connector, task = self.task_id, path = %place, files = listed.len(), "Parquet sink started");
            Ok(())
        })
    }

    fn stored_offsets<'a>(
        &'a mut self,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, Result<Vec<(TopicPartition, i64)>, ConnectError>> {
        Box::pin(async move {
            let manifests =
                Self::manifests(self.bucket.as_ref(), &self.base, &self.connector).await?;
            let resume = resume_offsets(&manifests);
            Ok(partitions
                .iter()
                .filter_map(|tp| {
                    let o = resume.get(&(tp.topic.as_str(), tp.partition))?;
                    Some((tp.clone(), *o))
                })
                .collect())
        })
    }

    fn put(&mut self, batch: SinkBatch) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            // Files are written under the topic a record was read from, so the manifest's
            // offsets and the open files agree (a router's topic is not a log position).
            for r in batch.records {
                self.add(r).await?;
            }
            for (tp, next) in batch.next_offsets {
                self.consumed.insert(tp, next);
            }
            self.commit_due(false).await
        })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(e) = self.commit_due(true).await {
                tracing::warn!(connector = %self.connector, error = %e, "committing open Parquet files at stop failed; they are written again after the restart");
            }
        })
    }
}

/// The Parquet sink connector.
#[derive(Default)]
pub struct ParquetSinkConnector;

impl SinkConnector for ParquetSinkConnector {
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_owned()
    }
    fn config_def(&self) -> ConfigDef {
        config_def()
    }
    fn validate(&self, props: &Properties) -> ConfigValidation {
        validate(props)
    }
    fn task_configs(
        &self,
        _props: &Properties,
        max_tasks: usize,
    ) -> Result<Vec<Properties>, ConnectError> {
        Ok((0..max_tasks.max(1)).map(|_| Properties::new()).collect())
    }
    fn create_task(&self) -> Box<dyn SinkTask> {
        Box::new(ParquetSinkTask::default())
    }
}

/// A row read back: its log offset and each column's value as text.
pub type FileRow = (i64, BTreeMap<String, String>);

/// Reads back every row of the complete files of `connector` under `base` for `topic`, as
/// `(kafka offset, column name -> value text)`, in file then row order; for tests and tools.
pub fn read_rows(base: &Path, connector: &str, topic: &str) -> Result<Vec<FileRow>, String> {
    use arrow_array::cast::AsArray;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let mut out = Vec::new();
    for m in read_manifests(base, connector)? {
        for f in m.files.iter().filter(|f| f.topic == topic) {
            let file = File::open(base.join(&f.path)).map_err(|e| format!("{}: {e}", f.path))?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                .and_then(|b| b.build())
                .map_err(|e| format!("{}: {e}", f.path))?;
            for batch in reader {
                let batch = batch.map_err(|e| format!("{}: {e}", f.path))?;
                let schema = batch.schema();
                let offsets = batch
                    .column_by_name("__kafka_offset")
                    .ok_or("no __kafka_offset column")?
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .clone();
                for row in 0..batch.num_rows() {
                    let mut cols = BTreeMap::new();
                    for (i, field) in schema.fields().iter().enumerate() {
                        let text = arrow_cast_display(batch.column(i), row)?;
                        cols.insert(field.name().clone(), text);
                    }
                    out.push((offsets.value(row), cols));
                }
            }
        }
    }
    Ok(out)
}

fn arrow_cast_display(array: &arrow_array::ArrayRef, row: usize) -> Result<String, String> {
    use arrow_array::Array;
    if array.is_null(row) {
        return Ok("NULL".into());
    }
    let formatter = arrow_array_display(array)?;
    Ok(formatter(row))
}

/// A per-row text rendering of an Arrow array for the types this sink writes.
fn arrow_array_display<'a>(
    array: &'a arrow_array::ArrayRef,
) -> Result<Box<dyn Fn(usize) -> String + 'a>, String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    use arrow_schema::{DataType, TimeUnit};
    Ok(match array.data_type() {
        DataType::Int8 => Box::new(move |r| array.as_primitive::<Int8Type>().value(r).to_string()),
        DataType::Int16 => {
            Box::new(move |r| array.as_primitive::<Int16Type>().value(r).to_string())
        }
        DataType::Int32 => {
            Box::new(move |r| array.as_primitive::<Int32Type>().value(r).to_string())
        }
        DataType::Int64 => {
            Box::new(move |r| array.as_primitive::<Int64Type>().value(r).to_string())
        }
        DataType::Float32 => {
            Box::new(move |r| array.as_primitive::<Float32Type>().value(r).to_string())
        }
        DataType::Float64 => {
            Box::new(move |r| array.as_primitive::<Float64Type>().value(r).to_string())
        }
        DataType::Boolean => Box::new(move |r| array.as_boolean().value(r).to_string()),
        DataType::Utf8 => Box::new(move |r| array.as_string::<i32>().value(r).to_owned()),
        DataType::Binary => Box::new(move |r| {
            array
                .as_binary::<i32>()
                .value(r)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        }),
        DataType::Date32 => Box::new(move |r| {
            let days = array.as_primitive::<Date32Type>().value(r);
            jiff::civil::Date::constant(1970, 1, 1)
                .checked_add(jiff::Span::new().days(i64::from(days)))
                .map(|d| d.to_string())
                .unwrap_or_default()
        }),
        DataType::Decimal128(_, scale) => {
            let scale = *scale;
            Box::new(move |r| {
                let v = array.as_primitive::<Decimal128Type>().value(r);
                headwater_api::logical::decimal::unscaled_to_string(
                    &headwater_api::logical::decimal::unscaled_from_i128(v),
                    i32::from(scale),
                )
            })
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => Box::new(move |r| {
            let us = array.as_primitive::<TimestampMicrosecondType>().value(r);
            jiff::Timestamp::from_microsecond(us)
                .map(|t| t.to_string())
                .unwrap_or_default()
        }),
        DataType::Timestamp(TimeUnit::Millisecond, _) => Box::new(move |r| {
            let ms = array.as_primitive::<TimestampMillisecondType>().value(r);
            jiff::Timestamp::from_millisecond(ms)
                .map(|t| t.to_string())
                .unwrap_or_default()
        }),
        DataType::Time64(TimeUnit::Microsecond) => Box::new(move |r| {
            array
                .as_primitive::<Time64MicrosecondType>()
                .value(r)
                .to_string()
        }),
        DataType::Time32(TimeUnit::Millisecond) => Box::new(move |r| {
            array
                .as_primitive::<Time32MillisecondType>()
                .value(r)
                .to_string()
        }),
        other => return Err(format!("unexpected column type {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use headwater_api::properties as props;

    #[test]
    fn paths_name_a_directory_or_a_bucket() {
        assert_eq!(
            base_dir("/data/lake").unwrap(),
            Destination::Local("/data/lake".into())
        );
        assert_eq!(
            base_dir("file:///data/lake").unwrap(),
            Destination::Local("/data/lake".into())
        );
        assert_eq!(
            base_dir("s3://analytics/cdc/files/").unwrap(),
            Destination::S3("analytics".into(), "cdc/files".into())
        );
        assert_eq!(
            base_dir("s3a://analytics").unwrap(),
            Destination::S3("analytics".into(), String::new())
        );
        assert!(base_dir("s3:///cdc").unwrap_err().contains("no bucket"));
        assert!(base_dir("gs://b/p").unwrap_err().contains("gcsfuse"));
    }

    #[test]
    fn manifests_belong_to_one_connector_and_task() {
        assert_eq!(manifest_task("lake-0.json", "lake"), Some(0));
        assert_eq!(manifest_task("lake-12.json", "lake"), Some(12));
        assert_eq!(manifest_task("lake-eu-0.json", "lake"), None);
        assert_eq!(manifest_task("lake-0.json.tmp", "lake"), None);
        assert_eq!(manifest_task("lake-+1.json", "lake"), None);
        assert_eq!(manifest_task("lakehouse-0.json", "lake"), None);
    }

    #[test]
    fn a_task_claims_only_its_own_files() {
        assert!(written_by_task("lake-1-0-5-9.parquet", "lake", 1));
        assert!(!written_by_task("lake-1-0-5-9.parquet", "lake", 0));
        assert!(written_by_task(".lake-1-0-5.parquet.tmp", "lake", 1));
        assert!(!written_by_task(".lake-1-0-5.parquet.tmp", "lake", 2));
        // The naming without the task belongs to task 0.
        assert!(written_by_task("lake-0-5-9.parquet", "lake", 0));
        assert!(!written_by_task("lake-0-5-9.parquet", "lake", 1));
        // Another connector whose name starts the same.
        assert!(!written_by_task("lake-eu-0-0-5-9.parquet", "lake", 0));
        assert!(!written_by_task("lakehouse-0-0-5-9.parquet", "lake", 0));
        assert!(!written_by_task("lake-0.json", "lake", 0));
    }

    #[test]
    fn start_up_cleaning_leaves_other_tasks_files_alone() {
        let dir = tempfile::tempdir().unwrap();
        let topic_dir = dir.path().join("t").join("dt=2026-12-04");
        std::fs::create_dir_all(&topic_dir).unwrap();
        let files = [
            "lake-1-0-0-9.parquet",     // task 1, listed
            "lake-1-0-10-19.parquet",   // task 1, not listed: removed
            ".lake-1-0-20.parquet.tmp", // task 1, staged: removed
            "lake-0-0-20-29.parquet",   // task 0, not listed (a sibling's): kept
            ".lake-0-0-30.parquet.tmp", // task 0, staged: kept
            "lake-eu-1-0-0-9.parquet",  // another connector: kept
        ];
        for f in files {
            std::fs::write(topic_dir.join(f), b"x").unwrap();
        }
        let task = ParquetSinkTask {
            base: dir.path().to_path_buf(),
            connector: "lake".into(),
            task_id: 1,
            ..Default::default()
        };
        task.remove_orphans(&HashSet::from([
            "t/dt=2026-12-04/lake-1-0-0-9.parquet".to_owned()
        ]));
        let mut left: Vec<String> = std::fs::read_dir(&topic_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".lake-0-0-30.parquet.tmp",
                "lake-0-0-20-29.parquet",
                "lake-1-0-0-9.parquet",
                "lake-eu-1-0-0-9.parquet"
            ]
        );
    }

    /// Plain rows `{id, k}` at offsets `0..n` of partition 0 of topic `t`, `k` alternating
    /// between two values so that files of two directories are open at once.
    fn interleaved_records(n: i64) -> Vec<SinkRecord> {
        use headwater_api::schema::{Schema, SchemaBuilder};
        let schema = SchemaBuilder::struct_()
            .name("t.Value")
            .field("id", Schema::int64())
            .field("k", Schema::string())
            .build_ref();
        (0..n)
            .map(|offset| {
                let row = Struct::from_values(
                    schema.clone(),
                    vec![
                        Value::Int64(offset),
                        Value::String(if offset % 3 == 0 { "a" } else { "b" }.into()),
                    ],
                )
                .unwrap();
                SinkRecord {
                    topic: "t".into(),
                    original_topic: "t".into(),
                    partition: 0,
                    offset,
                    timestamp: 0,
                    key_schema: None,
                    key: Value::Null,
                    value_schema: Some(schema.clone()),
                    value: Value::Struct(row),
                    headers: Default::default(),
                }
            })
            .collect()
    }

    async fn started_task(dir: &Path, partition_by: &str) -> ParquetSinkTask {
        let mut task = ParquetSinkTask::default();
        let context = SinkTaskContext {
            connector_name: "lake".into(),
            task_id: 0,
        };
        let path = dir.to_string_lossy().into_owned();
        task.start(
            context,
            props(&[
                ("parquet.path", path.as_str()),
                ("partition.by", partition_by),
                ("flush.size", "3"),
                ("rotate.interval.ms", "3600000"),
            ]),
        )
        .await
        .unwrap();
        // Archive early, so that every test also crosses archive writes.
        task.archive_batch = 2;
        task
    }

    /// Puts `records` in batches of four.
    async fn put_all(task: &mut ParquetSinkTask, records: &[SinkRecord]) {
        for batch in records.chunks(4) {
            let next = batch.last().unwrap().offset + 1;
            task.put(SinkBatch {
                records: batch.to_vec(),
                next_offsets: vec![(TopicPartition::new("t", 0), next)],
            })
            .await
            .unwrap();
        }
    }

    /// The log offsets of every row in the listed files of topic `t`, sorted.
    fn listed_offsets(dir: &Path) -> Vec<i64> {
        let mut offsets: Vec<i64> = read_rows(dir, "lake", "t")
            .unwrap()
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        offsets.sort_unstable();
        offsets
    }

    fn next_offset(m: &Manifest) -> i64 {
        m.next_offsets
            .get("t")
            .and_then(|p| p.get(&0))
            .copied()
            .unwrap_or(i64::MIN)
    }

    /// With one file open at a time, every manifest's next offset is past every row of the
    /// files it lists, also when a file fills (and is committed) in the middle of a batch.
    #[tokio::test]
    async fn with_one_open_file_the_next_offset_is_past_every_listed_row() {
        let dir = tempfile::tempdir().unwrap();
        let mut task = started_task(dir.path(), "none").await;
        put_all(&mut task, &interleaved_records(23)).await;
        assert!(task.written.len() >= 7, "{:?}", task.written);
        for m in &task.written {
            let next = next_offset(m);
            assert!(
                m.files.iter().all(|f| f.last_offset < next),
                "a listed file is past the next offset: {m:?}"
            );
        }
    }

    /// Settled files move into archives, so the manifest stays small; the archives keep
    /// them listed: a restart removes none of them, and reading gives every row once.
    #[tokio::test]
    async fn settled_files_move_into_archives_and_stay_listed() {
        let dir = tempfile::tempdir().unwrap();
        let mut task = started_task(dir.path(), "none").await;
        put_all(&mut task, &interleaved_records(23)).await;
        task.stop().await;
        let text = std::fs::read_to_string(dir.path().join("_headwater/lake-0.json")).unwrap();
        let own: Manifest = serde_json::from_str(&text).unwrap();
        assert!(own.archives.len() >= 3, "archives: {:?}", own.archives);
        assert!(
            own.files.len() < 2,
            "files left in the manifest: {:?}",
            own.files
        );
        for (n, rel) in own.archives.iter().enumerate() {
            assert_eq!(*rel, format!("_headwater/lake-0.archive-{}.json", n + 1));
        }
        // Every file, oldest first, each following on from the one before.
        let all = read_manifests(dir.path(), "lake").unwrap().remove(0).files;
        assert_eq!(all.len(), 8, "{all:?}");
        let mut expected_first = 0;
        for f in &all {
            assert_eq!(f.first_offset, expected_first, "{all:?}");
            expected_first = f.last_offset + 1;
        }
        assert_eq!(expected_first, 23);

        let parquet_files = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir.join("t"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let before = parquet_files(dir.path());
        assert_eq!(before.len(), 8);
        // A file a crash left unlisted is still removed at start; the archived ones stay.
        std::fs::write(dir.path().join("t/lake-0-0-23-25.parquet"), b"unlisted").unwrap();
        let mut restarted = started_task(dir.path(), "none").await;
        assert_eq!(parquet_files(dir.path()), before);
        let stored = restarted
            .stored_offsets(&[TopicPartition::new("t", 0)])
            .await
            .unwrap();
        assert_eq!(stored, [(TopicPartition::new("t", 0), 23)]);
        restarted.stop().await;
        assert_eq!(listed_offsets(dir.path()), (0..23).collect::<Vec<_>>());

        // Without an archive the manifest names, the task refuses to start (its files would
        // look unlisted and be removed).
        std::fs::remove_file(dir.path().join(&own.archives[0])).unwrap();
        let mut task = ParquetSinkTask::default();
        let path = dir.path().to_string_lossy().into_owned();
        let err = task
            .start(
                SinkTaskContext {
                    connector_name: "lake".into(),
                    task_id: 0,
                },
                props(&[("parquet.path", path.as_str())]),
            )
            .await
            .expect_err("a missing archive is refused");
        assert!(err.to_string().contains("lake-0.archive-1.json"), "{err}");
        assert_eq!(parquet_files(dir.path()), before);
    }

    /// An archive that cannot be written leaves the manifest as it was: its settled files stay
    /// in `files` (so the next manifest written, at the stop, still lists them) and no archive
    /// is named; the next attempt archives them.
    #[tokio::test]
    async fn a_failed_archive_write_leaves_the_manifest_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let mut task = started_task(dir.path(), "none").await;
        task.archive_batch = 100;
        put_all(&mut task, &interleaved_records(23)).await;
        task.stop().await;
        let before = task.manifest.clone();
        assert!(
            before.files.len() >= 7 && before.archives.is_empty(),
            "{before:?}"
        );
        // A directory where the first archive goes: writing it fails.
        let blocker = dir.path().join("_headwater/lake-0.archive-1.json");
        std::fs::create_dir_all(&blocker).unwrap();
        task.archive_batch = 2;
        assert!(task.archive_settled_files().await.is_err());
        assert_eq!(task.manifest, before);
        std::fs::remove_dir(&blocker).unwrap();
        task.archive_settled_files().await.unwrap();
        assert_eq!(task.manifest.archives, ["_headwater/lake-0.archive-1.json"]);
        let archive: ManifestArchive = serde_json::from_slice(
            &std::fs::read(dir.path().join(&task.manifest.archives[0])).unwrap(),
        )
        .unwrap();
        assert_eq!(
            archive.files.len() + task.manifest.files.len(),
            before.files.len()
        );
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            let dest = to.join(e.file_name());
            if e.path().is_dir() {
                copy_dir(&e.path(), &dest);
            } else {
                std::fs::copy(e.path(), dest).unwrap();
            }
        }
    }

    /// A crash right after any manifest write, then a restart that resumes from the stored
    /// offsets: every row ends up in the listed files exactly once. Files of two directories
    /// are open at once and full files are committed in the middle of batches, the two ways
    /// a listed file can hold rows past the manifest's next offset.
    #[tokio::test]
    async fn a_restart_after_any_manifest_write_stores_every_row_once() {
        let records = interleaved_records(23);
        let full = tempfile::tempdir().unwrap();
        let mut task = started_task(full.path(), "field:k").await;
        put_all(&mut task, &records).await;
        let manifests = std::mem::take(&mut task.written);
        assert!(
            manifests.len() > 4,
            "manifests written: {}",
            manifests.len()
        );
        assert!(
            manifests
                .iter()
                .any(|m| m.files.iter().any(|f| f.last_offset >= next_offset(m))),
            "no manifest lists a file past its next offset: the case is not exercised"
        );
        for (k, crashed_with) in manifests.iter().enumerate() {
            // The directory as a crash after manifest k leaves it: the files so far (later
            // ones are unlisted leftovers) and manifest k.
            let dir = tempfile::tempdir().unwrap();
            copy_dir(full.path(), dir.path());
            std::fs::write(
                dir.path().join("_headwater/lake-0.json"),
                serde_json::to_vec(crashed_with).unwrap(),
            )
            .unwrap();
            let mut task = started_task(dir.path(), "field:k").await;
            let tp = TopicPartition::new("t", 0);
            let stored = task
                .stored_offsets(std::slice::from_ref(&tp))
                .await
                .unwrap();
            let resume = stored.first().map_or(0, |(_, o)| *o);
            let rest: Vec<SinkRecord> = records
                .iter()
                .filter(|r| r.offset >= resume)
                .cloned()
                .collect();
            put_all(&mut task, &rest).await;
            task.stop().await;
            assert_eq!(
                listed_offsets(dir.path()),
                (0..23).collect::<Vec<_>>(),
                "after a crash with manifest {k} ({crashed_with:?}), resuming at {resume}"
            );
        }
    }

    #[test]
    fn bad_s3_settings_are_rejected_per_key() {
        let v = validate(&props(&[
            ("parquet.path", "s3://"),
            ("parquet.s3.endpoint", "minio:9000"),
        ]));
        let errors = v.errors_by_field();
        assert!(
            errors["parquet.path"][0].contains("no bucket"),
            "{errors:?}"
        );
        assert!(
            errors["parquet.s3.endpoint"][0].contains("http://"),
            "{errors:?}"
        );
        let ok = validate(&props(&[
            ("parquet.path", "s3://b/p"),
            ("parquet.s3.endpoint", "http://127.0.0.1:9000"),
            ("parquet.s3.secret.access.key", "s"),
        ]));
        assert_eq!(ok.error_count(), 0, "{:?}", ok.errors_by_field());
    }
}
