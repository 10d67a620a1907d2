//! Key, value and header conversion of a connector's records, configured from its properties
//! (`key.converter`, `value.converter`, `key.converter.<setting>`, ...) over the worker's
//! defaults (Kafka Connect's: `JsonConverter` with schemas for both). Converter classes come
//! from `headwater_format::converters` (JsonConverter, AvroConverter, StringConverter,
//! ByteArrayConverter).
//! Also the text form of a record for `errors.log.include.messages` ([`describe_record`]).

use headwater_api::config::ConfigValidation;
use std::sync::Arc;

use headwater_api::{Header, HeaderRunRef, Headers, Properties, SourceRecord, Value};
use headwater_format::converters::{create_converter, find_converter, Converter};
use headwater_format::{JsonConverter, JsonConverterConfig};
use headwater_log::{encode_record_headers, HeaderPart, RecordHeader};

const DEFAULT_CONVERTER: &str = "org.apache.kafka.connect.json.JsonConverter";

/// The converters of one connector.
pub struct Converters {
    pub key: Box<dyn Converter>,
    pub value: Box<dyn Converter>,
    header_json: JsonConverter,
}

/// Settings under `prefix` (e.g. `key.converter.`), with the prefix stripped.
fn sub_props(props: &Properties, prefix: &str) -> Properties {
    props
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(prefix)
                .map(|rest| (rest.to_owned(), v.clone()))
        })
        .collect()
}

/// A converter's own settings: those under `<which>.` plus `converter.type` (`key`/`value`),
/// which Kafka Connect's worker sets so one converter class can tell keys from values.
fn converter_props(props: &Properties, which: &str) -> Properties {
    let mut own = sub_props(props, &format!("{which}."));
    let kind = which.strip_suffix(".converter").unwrap_or(which);
    own.entry("converter.type".to_owned())
        .or_insert_with(|| kind.to_owned());
    own
}

impl Converters {
    /// Validates the converter settings, reporting each bad key.
    pub fn validate(props: &Properties) -> ConfigValidation {
        let mut v = ConfigValidation::default();
        for which in ["key.converter", "value.converter"] {
            let class = props.get(which).map_or(DEFAULT_CONVERTER, String::as_str);
            let Some(plugin) = find_converter(class) else {
                v.add_error(
                    which,
                    format!("Invalid value {class} for configuration {which}: Class {class} could not be found."),
                );
                continue;
            };
            if let Err(errors) = (plugin.configure)(&converter_props(props, which)) {
                for e in errors.entries() {
                    for message in &e.errors {
                        v.add_error(&format!("{which}.{}", e.name), message.clone());
                    }
                }
            }
        }
        v
    }

    /// Builds the converters; only called with validated properties.
    pub fn from_props(props: &Properties) -> Result<Self, headwater_api::ConnectError> {
        let make = |which: &str| {
            let class = props.get(which).map_or(DEFAULT_CONVERTER, String::as_str);
            create_converter(class, &converter_props(props, which))
        };
        Ok(Converters {
            key: make("key.converter")?,
            value: make("value.converter")?,
            header_json: JsonConverter::new(JsonConverterConfig {
                schemas_enable: false,
                ..JsonConverterConfig::default()
            }),
        })
    }

    /// Header values as bytes, the way Kafka Connect's `SimpleHeaderConverter` writes them:
    /// strings as UTF-8, other primitives as their text, structures as JSON, null as null.
    /// Strings and bytes are used as they are; the text of other values is written to
    /// `encoded` (cleared first). A run of headers shared by many records
    /// ([`Headers::push_shared`]) is encoded once into `runs` and reused while it lasts.
    /// `out` gets one entry per single header or shared run, in order; [`header_parts`] turns
    /// them into what the batch builder takes. Nothing is allocated once the buffers have
    /// grown and the runs are known.
    pub fn encode_headers(
        &self,
        headers: &Headers,
        encoded: &mut Vec<u8>,
        runs: &mut EncodedRuns,
        out: &mut Vec<HeaderBytes>,
    ) {
        encoded.clear();
        out.clear();
        runs.make_room();
        for part in headers.runs() {
            out.push(match part {
                HeaderRunRef::One(h) => self.value_bytes(h, encoded),
                HeaderRunRef::Shared(run) => HeaderBytes::Run(runs.index_of(run, |bytes| {
                    let mut text = Vec::new();
                    for h in run.iter() {
                        let at = self.value_bytes(h, &mut text);
                        let value = header_value(h, &at, &text);
                        encode_record_headers(
                            bytes,
                            std::iter::once(RecordHeader { key: &h.key, value }),
                        );
                        text.clear();
                    }
                })),
            });
        }
    }

    /// Where `h`'s value bytes are: its own, or its text appended to `encoded`.
    fn value_bytes(&self, h: &Header, encoded: &mut Vec<u8>) -> HeaderBytes {
        let start = encoded.len();
        let text = |encoded: &mut Vec<u8>, v: &dyn std::fmt::Display| {
            use std::io::Write as _;
            let _ = write!(encoded, "{v}");
            HeaderBytes::Encoded(start..encoded.len())
        };
        match &h.value {
            Value::Null => HeaderBytes::Null,
            Value::String(_) | Value::Bytes(_) => HeaderBytes::AsIs,
            Value::Boolean(b) => text(encoded, b),
            Value::Int8(v) => text(encoded, v),
            Value::Int16(v) => text(encoded, v),
            Value::Int32(v) => text(encoded, v),
            Value::Int64(v) => text(encoded, v),
            other => match self
                .header_json
                .from_connect_data("", h.schema.as_ref(), other)
            {
                Ok(Some(bytes)) => {
                    encoded.extend_from_slice(&bytes);
                    HeaderBytes::Encoded(start..encoded.len())
                }
                _ => HeaderBytes::Null,
            },
        }
    }
}

/// Where a header's bytes are, after [`Converters::encode_headers`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderBytes {
    /// A null value.
    Null,
    /// The value's own bytes (a string's UTF-8, a byte array).
    AsIs,
    /// This range of the encoded buffer.
    Encoded(std::ops::Range<usize>),
    /// A shared run, encoded whole in this entry of the [`EncodedRuns`].
    Run(usize),
}

/// Shared header runs in Kafka's record-header encoding, by the run they were made from (the
/// `Arc` is held, so its address cannot be reused while the entry lives). Once
/// [`EncodedRuns::MAX`] are kept the list starts over, but only between records, so the
/// entries one record's headers point to stay put while it is written.
#[derive(Default)]
pub struct EncodedRuns(Vec<(Arc<[Header]>, Vec<u8>)>);

impl EncodedRuns {
    /// Runs kept at once (a task has one; transforms may make a few more).
    pub const MAX: usize = 8;

    /// Starts the list over when it is full; called before a record's headers are encoded.
    fn make_room(&mut self) {
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
    }

    /// The entry of `run`, encoded by `encode` when it is new.
    fn index_of(&mut self, run: &Arc<[Header]>, encode: impl FnOnce(&mut Vec<u8>)) -> usize {
        if let Some(i) = self.0.iter().position(|(r, _)| Arc::ptr_eq(r, run)) {
            return i;
        }
        let mut bytes = Vec::new();
        encode(&mut bytes);
        self.0.push((run.clone(), bytes));
        self.0.len() - 1
    }
}

/// The batch builder's header parts of `headers` after [`Converters::encode_headers`] wrote
/// `at`, `encoded` and `runs`.
pub fn header_parts<'a>(
    headers: &'a Headers,
    at: &'a [HeaderBytes],
    encoded: &'a [u8],
    runs: &'a EncodedRuns,
) -> impl Iterator<Item = HeaderPart<'a>> {
    headers
        .runs()
        .zip(at)
        .map(move |(part, at)| match (part, at) {
            (HeaderRunRef::Shared(run), HeaderBytes::Run(i)) => HeaderPart::Encoded {
                count: run.len(),
                bytes: &runs.0[*i].1,
            },
            // encode_headers gives every shared run its entry.
            (HeaderRunRef::Shared(run), _) => {
                unreachable!("a shared run of {} headers without its encoding", run.len())
            }
            (HeaderRunRef::One(h), at) => HeaderPart::One(RecordHeader {
                key: &h.key,
                value: header_value(h, at, encoded),
            }),
        })
}

/// The bytes of `header` as [`Converters::encode_headers`] placed them.
pub fn header_value<'a>(
    header: &'a Header,
    at: &HeaderBytes,
    encoded: &'a [u8],
) -> Option<&'a [u8]> {
    match (at, &header.value) {
        (HeaderBytes::AsIs, Value::String(s)) => Some(s.as_bytes()),
        (HeaderBytes::AsIs, Value::Bytes(b)) => Some(b),
        (HeaderBytes::Encoded(range), _) => encoded.get(range.clone()),
        _ => None,
    }
}

/// The record as `errors.log.include.messages=true` logs it, in the shape of Kafka Connect's
/// `SourceRecord.toString()`: topic, partition, source partition and offset, key and value
/// (structs as `Struct{field=value,...}`).
pub fn describe_record(record: &SourceRecord) -> String {
    format!(
        "SourceRecord{{topic={}, kafkaPartition={}, sourcePartition={}, sourceOffset={}, key={}, value={}}}",
        record.topic,
        record
            .kafka_partition
            .map_or_else(|| "null".to_owned(), |p| p.to_string()),
        serde_json::to_string(&record.source_partition).unwrap_or_default(),
        serde_json::to_string(&record.source_offset).unwrap_or_default(),
        show_value(&record.key),
        show_value(&record.value)
    )
}

/// A value as Kafka Connect's `toString()` shows it.
fn show_value(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Boolean(v) => v.to_string(),
        Value::Int8(v) => v.to_string(),
        Value::Int16(v) => v.to_string(),
        Value::Int32(v) => v.to_string(),
        Value::Int64(v) => v.to_string(),
        Value::Float32(v) => v.to_string(),
        Value::Float64(v) => v.to_string(),
        Value::String(s) => s.clone(),
        Value::Bytes(b) => format!("[{} bytes]", b.len()),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(show_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Map(entries) => format!(
            "{{{}}}",
            entries
                .iter()
                .map(|(k, v)| format!("{}={}", show_value(k), show_value(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Struct(s) => {
            let fields: Vec<String> = s
                .schema()
                .fields()
                .iter()
                .zip(s.values())
                .filter(|(_, v)| !v.is_null())
                .map(|(f, v)| format!("{}={}", f.name(), show_value(v)))
                .collect();
            format!("Struct{{{}}}", fields.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headwater_api::{OffsetMap, OffsetValue, Schema, SchemaBuilder, Struct};

    #[test]
    fn shared_header_runs_are_encoded_once_and_write_what_single_headers_write() {
        use headwater_log::{BatchBuilder, Compression, DecodedBatch, ProducerFields};
        let converters = Converters::from_props(&Properties::new()).unwrap();
        let header = |key: &str, value: Value| Header {
            key: key.to_owned(),
            schema: None,
            value,
        };
        let run: Arc<[Header]> = vec![
            header("ctx.name", "cdc".into()),
            header("ctx.n", Value::Int32(7)),
            header("ctx.null", Value::Null),
        ]
        .into();
        let mut shared = Headers::new();
        shared.push_shared(&run);
        shared.prepend("first", None, Value::Boolean(true));
        shared.add("last", None, Value::Bytes(vec![1, 2]));
        let mut single = Headers::new();
        for h in shared.iter() {
            single.push(h.clone());
        }
        let (mut text, mut runs, mut at) = (Vec::new(), EncodedRuns::default(), Vec::new());
        let mut batches = Vec::new();
        for headers in [&shared, &single, &shared] {
            converters.encode_headers(headers, &mut text, &mut runs, &mut at);
            let parts: Vec<_> = header_parts(headers, &at, &text, &runs).collect();
            let mut b = BatchBuilder::new(Compression::None, ProducerFields::default());
            b.append_with_header_parts(1, None, &[], Some(b"v"), &[], &parts);
            batches.push(b.build().unwrap());
        }
        assert_eq!(runs.0.len(), 1, "one run, encoded once");
        assert_eq!(batches[0], batches[1]);
        assert_eq!(batches[0], batches[2]);
        let decoded = DecodedBatch::decode(&batches[0]).unwrap();
        let records = decoded.records().unwrap();
        let want: Vec<(&str, Option<&[u8]>)> = vec![
            ("first", Some(b"true")),
            ("ctx.name", Some(b"cdc")),
            ("ctx.n", Some(b"7")),
            ("ctx.null", None),
            ("last", Some(&[1, 2])),
        ];
        assert_eq!(records[0].headers, want);
        // Past MAX runs the list starts over, so it stays bounded.
        for _ in 0..EncodedRuns::MAX + 1 {
            let other: Arc<[Header]> = vec![header("x", "y".into())].into();
            let mut h = Headers::new();
            h.push_shared(&other);
            converters.encode_headers(&h, &mut text, &mut runs, &mut at);
        }
        assert!(runs.0.len() <= EncodedRuns::MAX);
        // A record with two runs, the first taking the list's last place, keeps both entries
        // while it is written.
        let (a, b): (Arc<[Header]>, Arc<[Header]>) = (
            vec![header("a", "1".into())].into(),
            vec![header("b", "2".into())].into(),
        );
        let mut runs = EncodedRuns::default();
        while runs.0.len() < EncodedRuns::MAX - 1 {
            let mut h = Headers::new();
            h.push_shared(&vec![header("x", "y".into())].into());
            converters.encode_headers(&h, &mut text, &mut runs, &mut at);
        }
        let mut two = Headers::new();
        two.push_shared(&a);
        two.push_shared(&b);
        converters.encode_headers(&two, &mut text, &mut runs, &mut at);
        let parts: Vec<_> = header_parts(&two, &at, &text, &runs).collect();
        let mut builder = BatchBuilder::new(Compression::None, ProducerFields::default());
        builder.append_with_header_parts(1, None, &[], Some(b"v"), &[], &parts);
        let built = builder.build().unwrap();
        let decoded = DecodedBatch::decode(&built).unwrap();
        let want: Vec<(&str, Option<&[u8]>)> = vec![("a", Some(b"1")), ("b", Some(b"2"))];
        assert_eq!(decoded.records().unwrap()[0].headers, want);
    }

    #[test]
    fn records_are_described_like_kafka_connect() {
        let schema = SchemaBuilder::struct_()
            .field("id", Schema::int64())
            .field("name", SchemaBuilder::string().optional().build_ref())
            .field("tags", SchemaBuilder::array(Schema::string()).build_ref())
            .build_ref();
        let value = Struct::new(schema.clone())
            .unwrap()
            .with("id", 7i64)
            .with("tags", Value::Array(vec!["a".into(), "b".into()]));
        let mut offset = OffsetMap::new();
        offset.insert("seq".into(), OffsetValue::Int(7));
        let record = SourceRecord::new(
            OffsetMap::new(),
            offset,
            "t",
            None,
            Value::Int32(7),
            Some(schema),
            Value::Struct(value),
        );
        assert_eq!(
            describe_record(&record),
            "SourceRecord{topic=t, kafkaPartition=null, sourcePartition={}, sourceOffset={\"seq\":7}, key=7, value=Struct{id=7,tags=[a, b]}}"
        );
    }
}
