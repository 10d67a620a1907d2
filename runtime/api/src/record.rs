//! Records as they flow from a source task through transforms to a converter.
//!
//! A [`SourceRecord`] carries the Kafka coordinates (topic, optional partition), the key and
//! value each with their optional schema, headers, a timestamp, and the source position it came
//! from: a *source partition* (which stream, e.g. `{"server": "cdc"}`) and a *source offset*
//! (where in that stream, e.g. `{"lsn": 123}`). Both maps hold only primitives, as Kafka Connect
//! requires, and are ordered so their JSON form (the offsets-topic key) is stable.
//!
//! Invariant: a record is a tombstone exactly when its value and value schema are both absent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::schema::SchemaRef;
use crate::value::Value;

/// A primitive that may appear in a source partition or offset map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OffsetValue {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
}

impl From<i64> for OffsetValue {
    fn from(v: i64) -> Self {
        OffsetValue::Int(v)
    }
}
impl From<bool> for OffsetValue {
    fn from(v: bool) -> Self {
        OffsetValue::Bool(v)
    }
}
impl From<&str> for OffsetValue {
    fn from(v: &str) -> Self {
        OffsetValue::String(v.to_owned())
    }
}
impl From<String> for OffsetValue {
    fn from(v: String) -> Self {
        OffsetValue::String(v)
    }
}

/// A source partition or source offset: primitive values by name, in key order.
pub type OffsetMap = BTreeMap<String, OffsetValue>;

/// One record header (`org.apache.kafka.connect.header.Header`).
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub key: String,
    pub schema: Option<SchemaRef>,
    pub value: Value,
}

/// Ordered record headers; a key may repeat, as in Kafka.
///
/// A run of headers that every record of a task carries (Debezium's context headers) is
/// shared, not copied: [`Headers::push_shared`] adds it as one `Arc`, and it is copied out
/// only when [`Headers::remove`] takes one of its headers away. Whatever is shared or not,
/// the headers read, compare and iterate as one ordered list.
#[derive(Clone, Debug, Default)]
pub struct Headers(Vec<HeaderRun>);

/// A part of [`Headers`] as [`Headers::runs`] shows it: one header, or a run shared with
/// other records (never empty), which a writer can encode once for all of them.
#[derive(Clone, Copy, Debug)]
pub enum HeaderRunRef<'a> {
    One(&'a Header),
    Shared(&'a std::sync::Arc<[Header]>),
}

/// A part of [`Headers`]: one header, or a shared run of them (never empty).
#[derive(Clone, Debug)]
enum HeaderRun {
    One(Header),
    Shared(std::sync::Arc<[Header]>),
}

impl HeaderRun {
    fn as_slice(&self) -> &[Header] {
        match self {
            HeaderRun::One(h) => std::slice::from_ref(h),
            HeaderRun::Shared(run) => run,
        }
    }
}

impl PartialEq for Headers {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Headers {
    pub fn new() -> Self {
        Headers(Vec::new())
    }
    pub fn add(&mut self, key: impl Into<String>, schema: Option<SchemaRef>, value: Value) {
        self.push(Header {
            key: key.into(),
            schema,
            value,
        });
    }
    /// Appends a built header.
    pub fn push(&mut self, header: Header) {
        self.0.push(HeaderRun::One(header));
    }
    /// Appends a run of headers shared with other records (nothing is copied).
    pub fn push_shared(&mut self, run: &std::sync::Arc<[Header]>) {
        if !run.is_empty() {
            self.0.push(HeaderRun::Shared(run.clone()));
        }
    }
    /// Puts a header before all others (Debezium's key-change headers precede its context
    /// headers).
    pub fn prepend(&mut self, key: impl Into<String>, schema: Option<SchemaRef>, value: Value) {
        self.0.insert(
            0,
            HeaderRun::One(Header {
                key: key.into(),
                schema,
                value,
            }),
        );
    }
    /// The last header with this key (Kafka's `lastWithName`).
    pub fn last_with_name(&self, key: &str) -> Option<&Header> {
        self.iter().rev().find(|h| h.key == key)
    }
    /// Removes every header with this key (a shared run holding one is copied out first).
    pub fn remove(&mut self, key: &str) {
        if !self.iter().any(|h| h.key == key) {
            return;
        }
        let runs = std::mem::take(&mut self.0);
        for run in runs {
            match run {
                HeaderRun::One(h) if h.key == key => {}
                HeaderRun::One(h) => self.0.push(HeaderRun::One(h)),
                HeaderRun::Shared(run) if run.iter().any(|h| h.key == key) => self.0.extend(
                    run.iter()
                        .filter(|h| h.key != key)
                        .map(|h| HeaderRun::One(h.clone())),
                ),
                shared => self.0.push(shared),
            }
        }
    }
    /// The headers in order, a shared run as one part.
    pub fn runs(&self) -> impl Iterator<Item = HeaderRunRef<'_>> {
        self.0.iter().map(|run| match run {
            HeaderRun::One(h) => HeaderRunRef::One(h),
            HeaderRun::Shared(run) => HeaderRunRef::Shared(run),
        })
    }
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Header> {
        self.0.iter().flat_map(HeaderRun::as_slice)
    }
    pub fn len(&self) -> usize {
        self.0.iter().map(|run| run.as_slice().len()).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What transforms and predicates can see and change of any record (source or sink), as Kafka
/// Connect's `ConnectRecord`.
pub trait ConnectRecord: Clone + Send + 'static {
    fn topic(&self) -> &str;
    fn set_topic(&mut self, topic: String);
    fn kafka_partition(&self) -> Option<i32>;
    fn set_kafka_partition(&mut self, partition: Option<i32>);
    fn key_schema(&self) -> Option<&SchemaRef>;
    fn key(&self) -> &Value;
    fn set_key(&mut self, schema: Option<SchemaRef>, key: Value);
    fn value_schema(&self) -> Option<&SchemaRef>;
    fn value(&self) -> &Value;
    fn set_value(&mut self, schema: Option<SchemaRef>, value: Value);
    /// Milliseconds since the epoch.
    fn timestamp(&self) -> Option<i64>;
    fn set_timestamp(&mut self, timestamp: Option<i64>);
    fn headers(&self) -> &Headers;
    fn headers_mut(&mut self) -> &mut Headers;
    /// Moves the key and its schema out, leaving a null key without schema. Transforms use it
    /// to rebuild a key without copying it; the default clones, records override it.
    fn take_key(&mut self) -> (Option<SchemaRef>, Value) {
        let taken = (self.key_schema().cloned(), self.key().clone());
        self.set_key(None, Value::Null);
        taken
    }
    /// Moves the value and its schema out, leaving a tombstone; see [`ConnectRecord::take_key`].
    fn take_value(&mut self) -> (Option<SchemaRef>, Value) {
        let taken = (self.value_schema().cloned(), self.value().clone());
        self.set_value(None, Value::Null);
        taken
    }
    /// A tombstone: no value and no value schema.
    fn is_tombstone(&self) -> bool {
        self.value().is_null() && self.value_schema().is_none()
    }
}

/// A record produced by a source task.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceRecord {
    pub source_partition: OffsetMap,
    pub source_offset: OffsetMap,
    pub topic: String,
    pub kafka_partition: Option<i32>,
    pub key_schema: Option<SchemaRef>,
    pub key: Value,
    pub value_schema: Option<SchemaRef>,
    pub value: Value,
    pub timestamp: Option<i64>,
    pub headers: Headers,
}

impl SourceRecord {
    /// A record with key and value; partition chosen by the key, no headers or timestamp.
    pub fn new(
        source_partition: OffsetMap,
        source_offset: OffsetMap,
        topic: impl Into<String>,
        key_schema: Option<SchemaRef>,
        key: Value,
        value_schema: Option<SchemaRef>,
        value: Value,
    ) -> Self {
        SourceRecord {
            source_partition,
            source_offset,
            topic: topic.into(),
            kafka_partition: None,
            key_schema,
            key,
            value_schema,
            value,
            timestamp: None,
            headers: Headers::new(),
        }
    }
}

impl ConnectRecord for SourceRecord {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn set_topic(&mut self, topic: String) {
        self.topic = topic;
    }
    fn kafka_partition(&self) -> Option<i32> {
        self.kafka_partition
    }
    fn set_kafka_partition(&mut self, partition: Option<i32>) {
        self.kafka_partition = partition;
    }
    fn key_schema(&self) -> Option<&SchemaRef> {
        self.key_schema.as_ref()
    }
    fn key(&self) -> &Value {
        &self.key
    }
    fn set_key(&mut self, schema: Option<SchemaRef>, key: Value) {
        self.key_schema = schema;
        self.key = key;
    }
    fn value_schema(&self) -> Option<&SchemaRef> {
        self.value_schema.as_ref()
    }
    fn value(&self) -> &Value {
        &self.value
    }
    fn set_value(&mut self, schema: Option<SchemaRef>, value: Value) {
        self.value_schema = schema;
        self.value = value;
    }
    fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }
    fn set_timestamp(&mut self, timestamp: Option<i64>) {
        self.timestamp = timestamp;
    }
    fn headers(&self) -> &Headers {
        &self.headers
    }
    fn headers_mut(&mut self) -> &mut Headers {
        &mut self.headers
    }
    fn take_key(&mut self) -> (Option<SchemaRef>, Value) {
        (self.key_schema.take(), std::mem::take(&mut self.key))
    }
    fn take_value(&mut self) -> (Option<SchemaRef>, Value) {
        (self.value_schema.take(), std::mem::take(&mut self.value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Schema;

    #[test]
    fn shared_runs_read_as_one_list_and_are_copied_out_only_to_remove_from_them() {
        let header = |key: &str, value: &str| Header {
            key: key.to_owned(),
            schema: Some(Schema::string()),
            value: value.into(),
        };
        let run: std::sync::Arc<[Header]> = vec![header("c1", "x"), header("c2", "y")].into();
        let mut headers = Headers::new();
        headers.push_shared(&run);
        headers.prepend("first", None, Value::Null);
        headers.add("c1", None, "later".into());
        headers.push_shared(&std::sync::Arc::from(Vec::new()));
        let keys = |h: &Headers| h.iter().map(|h| h.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&headers), ["first", "c1", "c2", "c1"]);
        assert_eq!(headers.len(), 4);
        assert_eq!(headers.last_with_name("c1").unwrap().value, "later".into());
        assert_eq!(headers.last_with_name("c2").unwrap().value, "y".into());
        let mut copied = Headers::new();
        copied.add("first", None, Value::Null);
        for h in run.iter() {
            copied.push(h.clone());
        }
        copied.add("c1", None, "later".into());
        assert_eq!(headers, copied, "equal by content, shared or not");
        headers.remove("c1");
        assert_eq!(keys(&headers), ["first", "c2"]);
        assert_eq!(run.len(), 2, "the shared run itself is untouched");
        headers.remove("first");
        headers.remove("c2");
        assert!(headers.is_empty());
    }

    #[test]
    fn tombstone_and_offset_json() {
        let mut partition = OffsetMap::new();
        partition.insert("server".into(), "cdc".into());
        let mut offset = OffsetMap::new();
        offset.insert("lsn".into(), 31228304i64.into());
        offset.insert("snapshot".into(), "INITIAL".into());
        let mut rec = SourceRecord::new(
            partition.clone(),
            offset.clone(),
            "cdc.public.orders",
            Some(Schema::int32()),
            Value::Int32(1),
            None,
            Value::Null,
        );
        assert!(rec.is_tombstone());
        rec.set_value(Some(Schema::optional_string()), Value::Null);
        assert!(
            !rec.is_tombstone(),
            "a null value with a schema is not a tombstone"
        );
        assert_eq!(
            serde_json::to_string(&offset).unwrap(),
            r#"{"lsn":31228304,"snapshot":"INITIAL"}"#
        );
        let back: OffsetMap =
            serde_json::from_str(r#"{"lsn":31228304,"snapshot":"INITIAL"}"#).unwrap();
        assert_eq!(back, offset);
        rec.headers_mut()
            .add("__debezium.oldkey", None, Value::Null);
        rec.headers_mut()
            .add("a", Some(Schema::string()), "1".into());
        rec.headers_mut()
            .add("a", Some(Schema::string()), "2".into());
        assert_eq!(
            rec.headers().last_with_name("a").unwrap().value,
            Value::from("2")
        );
        rec.headers_mut().remove("a");
        assert_eq!(rec.headers().len(), 1);
        rec.set_key(Some(Schema::int32()), Value::Int32(7));
        let (schema, key) = rec.take_key();
        assert_eq!((schema.is_some(), key), (true, Value::Int32(7)));
        assert!(rec.key().is_null() && rec.key_schema().is_none());
        let (schema, value) = rec.take_value();
        assert_eq!((schema.is_some(), value), (true, Value::Null));
        assert!(rec.is_tombstone());
    }
}
