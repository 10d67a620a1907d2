//! The JDBC sink plugin: [`JdbcSinkConnector`] (configuration, one task config per task) and
//! [`JdbcSinkTask`] (a batch -> changes -> plan -> one destination transaction with offsets).
//!
//! Invariant: `put` returns only after the destination committed the batch together with its
//! `next_offsets`; `stored_offsets` reads them back, so the engine resumes exactly after the
//! last committed batch whatever its own offsets say.

use std::sync::Arc;

use headwater_api::config::{ConfigDef, ConfigValidation};
use headwater_api::plugin::BoxFuture;
use headwater_api::{
    ConnectError, FieldsRead, Properties, SinkBatch, SinkConnector, SinkTask, SinkTaskContext,
    TopicPartition,
};

use crate::batch::plan;
use crate::change::{change_of, ShapeCache};
use crate::config::{self, DatabaseKind, InsertMode, JdbcSinkConfig};
use crate::mysql::MySqlWriter;
use crate::postgres::PgWriter;

/// Debezium's class name.
pub const CLASS: &str = "io.debezium.connector.jdbc.JdbcSinkConnector";

#[derive(Default)]
pub struct JdbcSinkConnector;

impl SinkConnector for JdbcSinkConnector {
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_owned()
    }
    fn config_def(&self) -> ConfigDef {
        config::config_def()
    }
    fn validate(&self, props: &Properties) -> ConfigValidation {
        config::validate(props)
    }
    fn task_configs(
        &self,
        _props: &Properties,
        max_tasks: usize,
    ) -> Result<Vec<Properties>, ConnectError> {
        // Partitions are spread over tasks by the engine; each task writes its own rows and
        // offsets (distinct (topic, partition) rows of the offsets table).
        Ok((0..max_tasks.max(1)).map(|_| Properties::new()).collect())
    }
    fn create_task(&self) -> Box<dyn SinkTask> {
        Box::new(JdbcSinkTask::default())
    }
}

enum Writer {
    Postgres(Box<PgWriter>),
    MySql(MySqlWriter),
}

#[derive(Default)]
pub struct JdbcSinkTask {
    cfg: Option<Arc<JdbcSinkConfig>>,
    writer: Option<Writer>,
    shapes: ShapeCache,
}

impl JdbcSinkTask {
    fn writer(&mut self) -> Result<(&Arc<JdbcSinkConfig>, &mut Writer), ConnectError> {
        match (&self.cfg, &mut self.writer) {
            (Some(c), Some(w)) => Ok((c, w)),
            _ => Err(ConnectError::fatal("the JDBC sink task was not started")),
        }
    }
}

impl SinkTask for JdbcSinkTask {
    fn start(
        &mut self,
        context: SinkTaskContext,
        props: Properties,
    ) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            let cfg = Arc::new(JdbcSinkConfig::parse(&props)?);
            let writer = match cfg.destination.kind {
                DatabaseKind::Postgres => Writer::Postgres(Box::new(
                    PgWriter::connect(cfg.clone(), &context.connector_name).await?,
                )),
                DatabaseKind::MySql => {
                    Writer::MySql(MySqlWriter::connect(cfg.clone(), &context.connector_name).await?)
                }
            };
            tracing::info!(connector = %context.connector_name, task = context.task_id, host = %cfg.destination.host, database = %cfg.destination.database, "JDBC sink connected");
            self.cfg = Some(cfg);
            self.writer = Some(writer);
            Ok(())
        })
    }

    fn stored_offsets<'a>(
        &'a mut self,
        partitions: &'a [TopicPartition],
    ) -> BoxFuture<'a, Result<Vec<(TopicPartition, i64)>, ConnectError>> {
        Box::pin(async move {
            let (_, writer) = self.writer()?;
            let all = match writer {
                Writer::Postgres(w) => w.stored_offsets().await?,
                Writer::MySql(w) => w.stored_offsets().await?,
            };
            Ok(all
                .into_iter()
                .filter(|(tp, _)| partitions.contains(tp))
                .collect())
        })
    }

    fn put(&mut self, batch: SinkBatch) -> BoxFuture<'_, Result<(), ConnectError>> {
        Box::pin(async move {
            if batch.records.is_empty() && batch.next_offsets.is_empty() {
                // The engine's idle call: nothing buffered here to flush.
                return Ok(());
            }
            let (cfg, writer, shapes) = match (&self.cfg, &mut self.writer) {
                (Some(c), Some(w)) => (c, w, &mut self.shapes),
                _ => return Err(ConnectError::fatal("the JDBC sink task was not started")),
            };
            let mut changes = Vec::with_capacity(batch.records.len());
            for r in batch.records {
                if let Some(c) = change_of(cfg, shapes, r)? {
                    changes.push(c);
                }
            }
            let plans = plan(changes, cfg.insert_mode != InsertMode::Insert);
            match writer {
                Writer::Postgres(w) => w.write(plans, &batch.next_offsets).await,
                Writer::MySql(w) => w.write(plans, &batch.next_offsets).await,
            }
        })
    }

    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.writer = None;
        })
    }

    /// Of a Debezium envelope, [`change_of`] reads `op` and `after`, and `source` only for a
    /// `collection.name.format` with `${source.*}` (deletes take their key from the record
    /// key; `before`, `transaction` and the time stamps are never read).
    fn value_fields_read(&self) -> Option<FieldsRead> {
        let cfg = self.cfg.as_ref()?;
        let mut read = vec!["op".to_owned(), "after".to_owned()];
        if cfg.collection_name_format.contains("${source.") {
            read.push("source".to_owned());
        }
        Some(FieldsRead {
            when_schema_has: crate::change::ENVELOPE_FIELDS
                .iter()
                .map(|f| (*f).to_owned())
                .collect(),
            read,
        })
    }
}
