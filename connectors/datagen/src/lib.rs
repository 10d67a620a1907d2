//! `datagen`: a source connector that generates deterministic, keyed records at a configurable
//! rate and count, for demos, tests and benchmarks (in the spirit of Confluent's datagen).
//!
//! Record `seq` (0, 1, 2, ...) has key `{"id": seq % keys}` and value
//! `{"seq", "id", "amount", "payload"}`, all derived from `seq` alone, so a run can be checked
//! exactly: after any crash and restart the topic must hold records 0..N exactly once, in order.
//!
//! Offsets: source partition `{"datagen": <topic>}`, offset `{"seq": <last seq written>}`; a
//! restarted task continues after the committed `seq`. Every poll ends on a transaction
//! boundary.

use std::time::{Duration, Instant};

use headwater_api::config::{ConfigDef, ConfigKey, ConfigType, Importance, Validator};
use headwater_api::plugin::BoxFuture;
use headwater_api::{
    ConnectError, OffsetMap, OffsetValue, Properties, Schema, SchemaBuilder, SchemaRef,
    SourceBatch, SourceConnector, SourceRecord, SourceTask, SourceTaskContext, Struct, Value,
};

/// The connector class name.
pub const CLASS: &str = "io.headwater.connect.datagen.DatagenConnector";

fn config_def() -> ConfigDef {
    ConfigDef::new()
        .define(
            ConfigKey::new("kafka.topic", ConfigType::String)
                .importance(Importance::High)
                .validator(Validator::NonEmptyString)
                .doc("Topic to write to."),
        )
        .define(
            ConfigKey::new("iterations", ConfigType::Long)
                .default_str("-1")
                .validator(Validator::at_least(-1.0))
                .importance(Importance::Medium)
                .doc("Number of records to generate in total; -1 generates forever."),
        )
        .define(
            ConfigKey::new("records.per.second", ConfigType::Double)
                .default_str("10")
                .validator(Validator::at_least(0.0))
                .importance(Importance::Medium)
                .doc("Generation rate; 0 generates as fast as the pipeline takes them."),
        )
        .define(
            ConfigKey::new("batch.size", ConfigType::Int)
                .default_str("100")
                .validator(Validator::between(1.0, 100_000.0))
                .importance(Importance::Low)
                .doc("Maximum records returned by one poll."),
        )
        .define(
            ConfigKey::new("keys", ConfigType::Long)
                .default_str("100")
                .validator(Validator::at_least(1.0))
                .importance(Importance::Low)
                .doc("Number of distinct keys (record seq modulo keys)."),
        )
        .define(
            ConfigKey::new("payload.bytes", ConfigType::Int)
                .default_str("32")
                .validator(Validator::between(0.0, 1_000_000.0))
                .importance(Importance::Low)
                .doc("Size of the generated payload string."),
        )
}

/// The datagen connector.
#[derive(Default)]
pub struct DatagenConnector;

impl SourceConnector for DatagenConnector {
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_owned()
    }
    fn config_def(&self) -> ConfigDef {
        config_def()
    }
    fn task_configs(
        &self,
        _props: &Properties,
        _max_tasks: usize,
    ) -> Result<Vec<Properties>, ConnectError> {
        // One generator: a single ordered sequence.
        Ok(vec![Properties::new()])
    }
    fn create_task(&self) -> Box<dyn SourceTask> {
        Box::new(DatagenTask::default())
    }
}

#[derive(Default)]
struct Settings {
    topic: String,
    iterations: i64,
    rate: f64,
    batch_size: usize,
    keys: i64,
    payload_bytes: usize,
}

/// Generates records.
#[derive(Default)]
pub struct DatagenTask {
    settings: Settings,
    next_seq: i64,
    started: Option<Instant>,
    first_seq_this_run: i64,
    key_schema: Option<SchemaRef>,
    value_schema: Option<SchemaRef>,
    partition: OffsetMap,
}

impl DatagenTask {
    fn record(&self, seq: i64) -> Result<SourceRecord, ConnectError> {
        let key_schema = self
            .key_schema
            .clone()
            .ok_or_else(|| ConnectError::fatal("task not started"))?;
        let value_schema = self
            .value_schema
            .clone()
            .ok_or_else(|| ConnectError::fatal("task not started"))?;
        let id = seq % self.settings.keys;
        let mut key = Struct::new(key_schema.clone())?;
        key.put("id", id)?;
        let mut value = Struct::new(value_schema.clone())?;
        value.put("seq", seq)?;
        value.put("id", id)?;
        value.put("amount", (seq % 10_000) as f64 / 100.0)?;
        let filler: String = (0..self.settings.payload_bytes)
            .map(|i| char::from(b'a' + ((seq as usize + i) % 26) as u8))
            .collect();
        value.put("payload", filler)?;
        let mut offset = OffsetMap::new();
        offset.insert("seq".into(), OffsetValue::Int(seq));
        Ok(SourceRecord::new(
            self.partition.clone(),
            offset,
            self.settings.topic.clone(),
            Some(key_schema),
            Value::Struct(key),
            Some(value_schema),
            Value::Struct(value),
        ))
    }
}

impl SourceTask for DatagenTask {
    fn start(
        &mut self,
        context: SourceTaskContext,
        props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            let parsed = config_def()
                .parse(&props)
                .map_err(|v| ConnectError::config(v.error_message()))?;
            self.settings = Settings {
                topic: parsed
                    .get_string("kafka.topic")
                    .unwrap_or_default()
                    .to_owned(),
                iterations: parsed.get_long("iterations").unwrap_or(-1),
                rate: parsed.get_double("records.per.second").unwrap_or(10.0),
                batch_size: parsed.get_long("batch.size").unwrap_or(100).max(1) as usize,
                keys: parsed.get_long("keys").unwrap_or(100).max(1),
                payload_bytes: parsed.get_long("payload.bytes").unwrap_or(32).max(0) as usize,
            };
            self.partition = OffsetMap::new();
            self.partition.insert(
                "datagen".into(),
                OffsetValue::String(self.settings.topic.clone()),
            );
            self.next_seq = match context.offset(&self.partition).and_then(|o| o.get("seq")) {
                Some(OffsetValue::Int(last)) => last + 1,
                _ => 0,
            };
            self.first_seq_this_run = self.next_seq;
            self.started = Some(Instant::now());
            self.key_schema = Some(
                SchemaBuilder::struct_()
                    .name("io.headwater.datagen.Key")
                    .field("id", Schema::int64())
                    .build_ref(),
            );
            self.value_schema = Some(
                SchemaBuilder::struct_()
                    .name("io.headwater.datagen.Value")
                    .field("seq", Schema::int64())
                    .field("id", Schema::int64())
                    .field("amount", Schema::float64())
                    .field("payload", Schema::string())
                    .build_ref(),
            );
            Ok(())
        })
    }

    fn poll(&mut self) -> BoxFuture<'_, Result<SourceBatch, ConnectError>> {
        Box::pin(async move {
            let limit = if self.settings.iterations < 0 {
                i64::MAX
            } else {
                self.settings.iterations
            };
            if self.next_seq >= limit {
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Ok(SourceBatch::empty());
            }
            let mut allowed = self.settings.batch_size as i64;
            if self.settings.rate > 0.0 {
                let elapsed = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
                let due = (elapsed * self.settings.rate) as i64 + 1
                    - (self.next_seq - self.first_seq_this_run);
                if due <= 0 {
                    let wait = 1.0 / self.settings.rate;
                    tokio::time::sleep(Duration::from_secs_f64(wait.min(0.1))).await;
                    return Ok(SourceBatch::empty());
                }
                allowed = allowed.min(due);
            }
            let end = (self.next_seq + allowed).min(limit);
            let mut records = Vec::with_capacity((end - self.next_seq) as usize);
            for seq in self.next_seq..end {
                records.push(self.record(seq)?);
            }
            self.next_seq = end;
            Ok(SourceBatch::committed(records))
        })
    }

    fn commit<'a>(
        &'a mut self,
        _committed: &'a [(OffsetMap, OffsetMap)],
    ) -> BoxFuture<'a, Result<(), ConnectError>> {
        Box::pin(async { Ok(()) })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use headwater_api::properties as props;

    #[tokio::test]
    async fn generates_deterministic_records_and_resumes_after_the_committed_offset() {
        let config = props(&[
            ("kafka.topic", "gen"),
            ("iterations", "5"),
            ("records.per.second", "0"),
            ("batch.size", "3"),
        ]);
        assert_eq!(DatagenConnector.validate(&config).error_count(), 0);
        let mut task = DatagenTask::default();
        task.start(SourceTaskContext::default(), config.clone())
            .await
            .unwrap();
        let first = task.poll().await.unwrap();
        assert_eq!(first.records.len(), 3);
        let second = task.poll().await.unwrap();
        assert_eq!(second.records.len(), 2);
        let last = &second.records[1];
        assert_eq!(last.source_offset.get("seq"), Some(&OffsetValue::Int(4)));
        assert!(
            task.poll().await.unwrap().records.is_empty(),
            "iterations reached"
        );

        let mut resumed = DatagenTask::default();
        let mut partition = OffsetMap::new();
        partition.insert("datagen".into(), OffsetValue::String("gen".into()));
        let mut offset = OffsetMap::new();
        offset.insert("seq".into(), OffsetValue::Int(2));
        let ctx = SourceTaskContext {
            committed_offsets: vec![(partition, offset)],
            ..Default::default()
        };
        resumed.start(ctx, config).await.unwrap();
        let again = resumed.poll().await.unwrap();
        assert_eq!(again.records.len(), 2);
        assert_eq!(
            again.records[0].source_offset.get("seq"),
            Some(&OffsetValue::Int(3))
        );
        assert_eq!(
            again.records[0],
            resumed.record(3).unwrap(),
            "same seq, same record"
        );
    }

    #[test]
    fn rejects_bad_settings() {
        let v = DatagenConnector.validate(&props(&[("iterations", "-5"), ("batch.size", "0")]));
        assert_eq!(v.error_count(), 3, "{:?}", v.errors_by_field());
    }
}
