//! Writing to PostgreSQL: one transaction per batch that applies the batch's steps and upserts
//! the consumed offsets into the offsets table, so rows and offsets commit together.
//!
//! Rows travel by `COPY ... FROM STDIN` into a temporary staging table per (table, column set),
//! `ON COMMIT DELETE ROWS`, then one set-based statement per step:
//! `INSERT ... SELECT ... ON CONFLICT (key) DO UPDATE` (upsert), `UPDATE ... FROM` (update),
//! `INSERT ... SELECT` (insert), `DELETE ... USING` (deletes). A row whose columns are partly
//! unchanged (TOAST) is staged with only the columns it has, so the others keep their values.
//! A COPY uses the binary format when every column's (Connect schema, column type) pair has a
//! binary encoding ([`crate::pgbinary`]), which spares the server parsing numerics and
//! timestamps as text; otherwise the text format.
//!
//! Invariants: nothing of a batch is visible unless all of it and its offsets are; a batch
//! locks each existing table it writes (`ROW EXCLUSIVE`, what its COPY takes anyway) before
//! checking that the column types it knows are still the table's, so a column altered while
//! the task runs is looked up again instead of receiving values encoded for its old type; the
//! offsets table only ever moves forward per (connector, topic, partition) within one
//! connector's single writer; errors that a retry can cure (connection loss, serialization failures,
//! deadlocks) are retriable, all others fatal with the statement's message.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::SinkExt;
use headwater_api::{ConnectError, TopicPartition, Value};
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use crate::batch::{group_by_columns, ColumnGroup, Step, TablePlan, UpsertRow};
use crate::change::{Column, Shape};
use crate::config::{DatabaseKind, DestinationTls, InsertMode, JdbcSinkConfig};
use crate::pgbinary::{self, BinaryEncoding};
use crate::values::{copy_escape, render};

/// Bytes of COPY data sent per chunk.
const COPY_CHUNK: usize = 1024 * 1024;

fn pg_err(context: &str, e: tokio_postgres::Error) -> ConnectError {
    let retriable = e.is_closed()
        || e.as_db_error().is_none()
        || e.code().is_some_and(|c| {
            let c = c.code();
            c.starts_with("08")
                || c.starts_with("57P")
                || c == "40001"
                || c == "40P01"
                || c == "53300"
        });
    let detail = match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => headwater_connector_postgres::sql_error_text(&e),
    };
    let msg = format!("{context}: {detail}");
    if detail.contains("invalid peer certificate") || detail.contains("server does not support TLS")
    {
        // The certificate check the URL's sslmode asks for failed: retrying will not help.
        ConnectError::config(msg)
    } else if retriable {
        ConnectError::retriable(msg)
    } else {
        ConnectError::fatal(msg)
    }
}

fn quote(name: &str, always: bool) -> String {
    crate::sql::quote(DatabaseKind::Postgres, name, always)
}

fn quote_table(name: &str, always: bool) -> String {
    crate::sql::quote_table(DatabaseKind::Postgres, name, always)
}

/// What is known about a destination table.
#[derive(Clone, Debug)]
struct TableMeta {
    columns: Vec<String>,
    /// Column name -> type OID (a domain's base type).
    types: HashMap<String, u32>,
    /// Column sets (sorted) of its unique indexes, the primary key among them.
    unique_keys: Vec<Vec<String>>,
}

/// Why a COPY failed.
enum CopyError {
    Pg(tokio_postgres::Error),
    Other(ConnectError),
}

impl CopyError {
    fn into_connect(self) -> ConnectError {
        match self {
            CopyError::Pg(e) => pg_err("COPY", e),
            CopyError::Other(e) => e,
        }
    }
    fn is_unique_violation(&self) -> bool {
        matches!(self, CopyError::Pg(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION))
    }
}

pub struct PgWriter {
    client: Client,
    conn: JoinHandle<()>,
    cfg: Arc<JdbcSinkConfig>,
    connector: String,
    tables: HashMap<String, TableMeta>,
    /// (table, staged columns) -> temporary staging table.
    stages: HashMap<(String, Vec<String>), String>,
    /// Tables where a COPY straight into the table met an existing key: they merge.
    merge_only: std::collections::HashSet<String>,
    /// Staging tables created on this connection (names are never reused).
    stages_created: usize,
}

impl Drop for PgWriter {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl PgWriter {
    pub async fn connect(
        cfg: Arc<JdbcSinkConfig>,
        connector: &str,
    ) -> Result<PgWriter, ConnectError> {
        let d = &cfg.destination;
        let mut pc = tokio_postgres::Config::new();
        pc.host(&d.host)
            .port(d.port)
            .user(&cfg.username)
            .dbname(&d.database)
            .application_name(format!("headwater-sink-{connector}"));
        if let Some(p) = &cfg.password {
            pc.password(p);
        }
        let tls = match &d.tls {
            DestinationTls::Postgres(t) => t.clone(),
            DestinationTls::MySql(_) => headwater_connector_postgres::tls::TlsSettings::disabled(),
        };
        let (client, conn) = headwater_connector_postgres::tls::connect_sql(&pc, &tls)
            .await
            .map_err(|e| match e {
                headwater_connector_postgres::tls::SqlConnectError::Settings(m) => {
                    ConnectError::config(m)
                }
                headwater_connector_postgres::tls::SqlConnectError::Sql(e) => pg_err(
                    &format!(
                        "connecting to PostgreSQL at {}:{}/{}",
                        d.host, d.port, d.database
                    ),
                    e,
                ),
            })?;
        let table = quote_table(&cfg.offsets_table, cfg.quote_identifiers);
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                    connector text NOT NULL,
                    topic text NOT NULL,
                    kafka_partition integer NOT NULL,
                    next_offset bigint NOT NULL,
                    updated_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (connector, topic, kafka_partition))"
            ))
            .await
            .map_err(|e| pg_err(&format!("creating the offsets table {table}"), e))?;
        Ok(PgWriter {
            client,
            conn,
            cfg,
            connector: connector.to_owned(),
            tables: HashMap::new(),
            stages: HashMap::new(),
            merge_only: Default::default(),
            stages_created: 0,
        })
    }

    /// The offsets this connector committed with its rows.
    pub async fn stored_offsets(&self) -> Result<Vec<(TopicPartition, i64)>, ConnectError> {
        let table = quote_table(&self.cfg.offsets_table, self.cfg.quote_identifiers);
        let rows = self
            .client
            .query(
                &format!(
                    "SELECT topic, kafka_partition, next_offset FROM {table} WHERE connector = $1"
                ),
                &[&self.connector],
            )
            .await
            .map_err(|e| pg_err("reading the sink offsets", e))?;
        Ok(rows
            .iter()
            .map(|r| {
                let p: i32 = r.get(1);
                (
                    TopicPartition::new(r.get::<_, String>(0), p as u32),
                    r.get(2),
                )
            })
            .collect())
    }

    /// Applies the plans and stores `next_offsets`, all in one transaction.
    pub async fn write(
        &mut self,
        plans: Vec<(String, TablePlan)>,
        next_offsets: &[(TopicPartition, i64)],
    ) -> Result<(), ConnectError> {
        self.client
            .batch_execute("BEGIN")
            .await
            .map_err(|e| pg_err("BEGIN", e))?;
        let result = self.write_in_transaction(plans, next_offsets).await;
        match result {
            Ok(()) => self
                .client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| pg_err("COMMIT", e)),
            Err(e) => {
                let _ = self.client.batch_execute("ROLLBACK").await;
                // Table shapes may have changed under a failed statement: look them up again.
                self.tables.clear();
                Err(e)
            }
        }
    }

    async fn write_in_transaction(
        &mut self,
        plans: Vec<(String, TablePlan)>,
        next_offsets: &[(TopicPartition, i64)],
    ) -> Result<(), ConnectError> {
        for (table, mut plan) in plans {
            self.lock_and_check_types(&table).await?;
            self.carry_unchanged(&table, &mut plan).await?;
            for step in plan.steps {
                match step {
                    Step::Truncate => {
                        if self.table_meta(&table).await?.is_some() {
                            let q = quote_table(&table, self.cfg.quote_identifiers);
                            self.client
                                .batch_execute(&format!("TRUNCATE TABLE {q}"))
                                .await
                                .map_err(|e| pg_err(&format!("truncating {q}"), e))?;
                        }
                    }
                    Step::Deletes(shape, keys) => self.delete(&table, &shape, keys).await?,
                    Step::Upserts(rows) => self.upsert(&table, rows).await?,
                }
            }
        }
        if !next_offsets.is_empty() {
            let table = quote_table(&self.cfg.offsets_table, self.cfg.quote_identifiers);
            let topics: Vec<&str> = next_offsets
                .iter()
                .map(|(tp, _)| tp.topic.as_str())
                .collect();
            let partitions: Vec<i32> = next_offsets
                .iter()
                .map(|(tp, _)| tp.partition as i32)
                .collect();
            let offsets: Vec<i64> = next_offsets.iter().map(|(_, o)| *o).collect();
            self.client
                .execute(
                    &format!(
                        "INSERT INTO {table} (connector, topic, kafka_partition, next_offset, updated_at)
                         SELECT $1, t, p, o, now() FROM unnest($2::text[], $3::int[], $4::bigint[]) AS x(t, p, o)
                         ON CONFLICT (connector, topic, kafka_partition)
                         DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = EXCLUDED.updated_at"
                    ),
                    &[&self.connector, &topics, &partitions, &offsets],
                )
                .await
                .map_err(|e| pg_err("storing the sink offsets", e))?;
        }
        Ok(())
    }

    /// For the create half of a primary-key change whose unchanged (TOAST) columns the source
    /// did not send: takes them from the old row, before the batch deletes it. The values come
    /// back as PostgreSQL's text output, which is valid input for the same column types.
    async fn carry_unchanged(
        &mut self,
        table: &str,
        plan: &mut TablePlan,
    ) -> Result<(), ConnectError> {
        let always = self.cfg.quote_identifiers;
        for step in &mut plan.steps {
            let Step::Upserts(rows) = step else { continue };
            for row in rows.iter_mut() {
                let Some((sql, old_key, carried)) =
                    crate::sql::carry_query(DatabaseKind::Postgres, always, table, row)
                else {
                    continue;
                };
                if self.table_meta(table).await?.is_none() {
                    continue;
                }
                let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = old_key
                    .iter()
                    .map(|s| s as &(dyn tokio_postgres::types::ToSql + Sync))
                    .collect();
                let Some(found) = self.client.query_opt(&sql, &params).await.map_err(|e| {
                    pg_err(
                        &format!("reading the old row of a key change in {table}"),
                        e,
                    )
                })?
                else {
                    continue;
                };
                let values = (0..carried.len())
                    .map(|j| {
                        found
                            .get::<_, Option<String>>(j)
                            .map_or(Value::Null, Value::String)
                    })
                    .collect();
                crate::sql::fill_carried(
                    row,
                    &carried,
                    values,
                    crate::sql::carried_schema(DatabaseKind::Postgres),
                );
            }
        }
        Ok(())
    }

    async fn table_meta(&mut self, table: &str) -> Result<Option<TableMeta>, ConnectError> {
        if let Some(m) = self.tables.get(table) {
            return Ok(Some(m.clone()));
        }
        let (schema, name) = match table.split_once('.') {
            Some((s, t)) => (Some(s.to_owned()), t.to_owned()),
            None => (None, table.to_owned()),
        };
        let rows = self
            .client
            .query(
                "SELECT column_name::text FROM information_schema.columns
                  WHERE table_schema = coalesce($1, current_schema()) AND table_name = $2
                  ORDER BY ordinal_position",
                &[&schema, &name],
            )
            .await
            .map_err(|e| pg_err(&format!("looking up table {table}"), e))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let types = self.column_types(table).await?;
        let unique = self
            .client
            .query(
                "SELECT array_agg(a.attname::text ORDER BY a.attname::text)
                   FROM pg_index i
                   JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                  WHERE i.indrelid = $1::text::regclass AND i.indisunique AND i.indpred IS NULL
                  GROUP BY i.indexrelid",
                &[&quote_table(table, true)],
            )
            .await
            .map_err(|e| pg_err(&format!("looking up the unique indexes of {table}"), e))?;
        let meta = TableMeta {
            columns: rows.iter().map(|r| r.get(0)).collect(),
            types,
            unique_keys: unique.iter().map(|r| r.get(0)).collect(),
        };
        self.tables.insert(table.to_owned(), meta.clone());
        Ok(Some(meta))
    }

    /// Column name -> type OID of `table` (domains resolved to their base type).
    async fn column_types(&self, table: &str) -> Result<HashMap<String, u32>, ConnectError> {
        let rows = self
            .client
            .query(
                "SELECT a.attname::text,
                        (CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END)::int8
                   FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
                &[&quote_table(table, true)],
            )
            .await
            .map_err(|e| pg_err(&format!("looking up the column types of {table}"), e))?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), u32::try_from(r.get::<_, i64>(1)).unwrap_or(0)))
            .collect())
    }

    /// Locks an existing `table` for this transaction (`ROW EXCLUSIVE`: writers go on, DDL
    /// waits) and checks that its column types are still the ones this writer knows; when not,
    /// forgets what it knew of the table (and its staging tables), to be looked up afresh.
    async fn lock_and_check_types(&mut self, table: &str) -> Result<(), ConnectError> {
        let Some(meta) = self.table_meta(table).await? else {
            return Ok(());
        };
        let q = quote_table(table, self.cfg.quote_identifiers);
        self.client
            .batch_execute(&format!("LOCK TABLE {q} IN ROW EXCLUSIVE MODE"))
            .await
            .map_err(|e| pg_err(&format!("locking {q}"), e))?;
        if self.column_types(table).await? != meta.types {
            tracing::info!(table = %table, "the destination table's columns changed: looking it up again");
            self.tables.remove(table);
            self.stages.retain(|(t, _), _| t != table);
        }
        Ok(())
    }

    /// Makes sure the table exists with every column of `shape` (schema evolution), or says
    /// what is missing.
    async fn ensure_table(&mut self, table: &str, shape: &Shape) -> Result<(), ConnectError> {
        let existing = self.table_meta(table).await?.map(|m| m.columns);
        let evolution = crate::sql::evolution(
            DatabaseKind::Postgres,
            self.cfg.quote_identifiers,
            self.cfg.schema_evolution,
            table,
            shape,
            existing.as_deref(),
        )?;
        let statements = match evolution {
            crate::sql::Evolution::Nothing => return Ok(()),
            crate::sql::Evolution::Create(ddl) => vec![(None, ddl)],
            crate::sql::Evolution::AddColumns(cols) => {
                cols.into_iter().map(|(c, ddl)| (Some(c), ddl)).collect()
            }
        };
        for (column, ddl) in statements {
            tracing::info!(table = %table, ddl = %ddl, "evolving the destination schema (schema.evolution=basic)");
            self.client.batch_execute(&ddl).await.map_err(|e| {
                let what = column.map_or(format!("creating table {table}"), |c| {
                    format!("adding column {c} to {table}")
                });
                pg_err(&what, e)
            })?;
        }
        self.tables.remove(table);
        Ok(())
    }

    /// Whether rows of `shape` may be COPYed straight into `table`: no key conflict seen yet
    /// and a unique index on exactly the key columns, so a conflicting key fails the COPY
    /// instead of duplicating a row.
    async fn direct_copy_possible(
        &mut self,
        table: &str,
        shape: &Shape,
    ) -> Result<bool, ConnectError> {
        if shape.key.is_empty() || self.merge_only.contains(table) {
            return Ok(false);
        }
        let Some(meta) = self.table_meta(table).await? else {
            return Ok(false);
        };
        let mut key: Vec<String> = shape
            .key
            .iter()
            .map(|&i| shape.columns[i].name.clone())
            .collect();
        key.sort();
        Ok(meta.unique_keys.contains(&key))
    }

    /// The staging table for `columns` of `table`.
    async fn stage(&mut self, table: &str, columns: &[String]) -> Result<String, ConnectError> {
        let k = (table.to_owned(), columns.to_vec());
        if let Some(s) = self.stages.get(&k) {
            return Ok(s.clone());
        }
        self.stages_created += 1;
        let name = format!("headwater_stage_{}", self.stages_created);
        let always = self.cfg.quote_identifiers;
        let cols: Vec<String> = columns.iter().map(|c| quote(c, always)).collect();
        self.client
            .batch_execute(&format!(
                "CREATE TEMP TABLE IF NOT EXISTS {name} ON COMMIT DELETE ROWS AS SELECT {} FROM {} WITH NO DATA",
                cols.join(", "),
                quote_table(table, always)
            ))
            .await
            .map_err(|e| pg_err(&format!("creating a staging table for {table}"), e))?;
        self.stages.insert(k, name.clone());
        Ok(name)
    }

    /// The binary encodings of `columns` of `table` (see [`pgbinary`]), or `None` when one
    /// of them has none and the COPY must use text.
    async fn binary_encodings(
        &mut self,
        table: &str,
        columns: &[&Column],
    ) -> Result<Option<Vec<BinaryEncoding>>, ConnectError> {
        let Some(meta) = self.table_meta(table).await? else {
            return Ok(None);
        };
        Ok(columns
            .iter()
            .map(|c| {
                let oid = meta.types.get(&c.name)?;
                pgbinary::encoding_for(&c.schema, *oid)
            })
            .collect())
    }

    /// COPYs rows (each a list of (column schema, value)) into `stage`, in binary when
    /// `encodings` (one per column) are given, else in text.
    async fn copy_into(
        &self,
        stage: &str,
        columns: &[String],
        encodings: Option<&[BinaryEncoding]>,
        rows: impl Iterator<Item = Vec<(&Column, &Value)>>,
    ) -> Result<u64, CopyError> {
        let always = self.cfg.quote_identifiers;
        let cols: Vec<String> = columns.iter().map(|c| quote(c, always)).collect();
        let format = if encodings.is_some() {
            " (FORMAT binary)"
        } else {
            ""
        };
        let sink = self
            .client
            .copy_in(&format!(
                "COPY {stage} ({}) FROM STDIN{format}",
                cols.join(", ")
            ))
            .await
            .map_err(CopyError::Pg)?;
        futures_util::pin_mut!(sink);
        let mut buf = Vec::with_capacity(COPY_CHUNK + 64 * 1024);
        let mut text = Vec::new();
        let mut n = 0u64;
        if encodings.is_some() {
            buf.extend_from_slice(pgbinary::HEADER);
        }
        for row in rows {
            if let Some(encodings) = encodings {
                buf.extend_from_slice(&(row.len() as i16).to_be_bytes());
                for ((col, value), encoding) in row.iter().zip(encodings) {
                    pgbinary::encode(*encoding, &col.name, &col.schema, value, &mut buf)
                        .map_err(CopyError::Other)?;
                }
            } else {
                for (i, (col, value)) in row.iter().enumerate() {
                    if i > 0 {
                        buf.push(b'\t');
                    }
                    text.clear();
                    if render(
                        DatabaseKind::Postgres,
                        &col.name,
                        &col.schema,
                        value,
                        &mut text,
                    )
                    .map_err(CopyError::Other)?
                    {
                        copy_escape(&text, &mut buf);
                    } else {
                        buf.extend_from_slice(b"\\N");
                    }
                }
                buf.push(b'\n');
            }
            n += 1;
            if buf.len() >= COPY_CHUNK {
                let chunk = bytes::Bytes::from(std::mem::replace(
                    &mut buf,
                    Vec::with_capacity(COPY_CHUNK + 64 * 1024),
                ));
                sink.send(chunk).await.map_err(CopyError::Pg)?;
            }
        }
        if encodings.is_some() {
            buf.extend_from_slice(pgbinary::TRAILER);
        }
        if !buf.is_empty() {
            sink.send(bytes::Bytes::from(buf))
                .await
                .map_err(CopyError::Pg)?;
        }
        sink.finish().await.map_err(CopyError::Pg)?;
        Ok(n)
    }

    async fn delete(
        &mut self,
        table: &str,
        shape: &Shape,
        keys: Vec<Vec<Value>>,
    ) -> Result<(), ConnectError> {
        if self.table_meta(table).await?.is_none() {
            // Nothing to delete from.
            return Ok(());
        }
        let names: Vec<String> = shape
            .key
            .iter()
            .map(|&i| shape.columns[i].name.clone())
            .collect();
        let stage = self.stage(table, &names).await?;
        let key_cols: Vec<&Column> = shape.key.iter().map(|&i| &shape.columns[i]).collect();
        let encodings = self.binary_encodings(table, &key_cols).await?;
        self.copy_into(
            &stage,
            &names,
            encodings.as_deref(),
            keys.iter()
                .map(|k| key_cols.iter().copied().zip(k.iter()).collect()),
        )
        .await
        .map_err(CopyError::into_connect)?;
        let always = self.cfg.quote_identifiers;
        let cond: Vec<String> = names
            .iter()
            .map(|c| format!("t.{0} = s.{0}", quote(c, always)))
            .collect();
        let q = quote_table(table, always);
        self.client
            .batch_execute(&format!(
                "DELETE FROM {q} AS t USING {stage} AS s WHERE {}; TRUNCATE {stage}",
                cond.join(" AND ")
            ))
            .await
            .map_err(|e| pg_err(&format!("deleting from {table}"), e))?;
        Ok(())
    }

    async fn upsert(&mut self, table: &str, rows: Vec<UpsertRow>) -> Result<(), ConnectError> {
        for ColumnGroup {
            shape,
            present,
            rows,
        } in group_by_columns(rows)
        {
            self.ensure_table(table, &shape).await?;
            let names: Vec<String> = present
                .iter()
                .map(|&i| shape.columns[i].name.clone())
                .collect();
            let cols: Vec<&Column> = present.iter().map(|&i| &shape.columns[i]).collect();
            let encodings = self.binary_encodings(table, &cols).await?;
            if self.cfg.insert_mode == InsertMode::Upsert
                && present.len() == shape.columns.len()
                && self.direct_copy_possible(table, &shape).await?
            {
                // Rows whose keys are new need no merge: COPY them straight into the table.
                // A key that exists makes the unique index refuse the COPY; then the savepoint
                // undoes it and the rows take the merge path (and the table keeps to it).
                let q = quote_table(table, self.cfg.quote_identifiers);
                self.client
                    .batch_execute("SAVEPOINT headwater_direct_copy")
                    .await
                    .map_err(|e| pg_err("SAVEPOINT", e))?;
                let copied = self
                    .copy_into(
                        &q,
                        &names,
                        encodings.as_deref(),
                        rows.iter()
                            .map(|r| cols.iter().copied().zip(r.iter()).collect()),
                    )
                    .await;
                match copied {
                    Ok(_) => {
                        self.client
                            .batch_execute("RELEASE SAVEPOINT headwater_direct_copy")
                            .await
                            .map_err(|e| pg_err("RELEASE SAVEPOINT", e))?;
                        continue;
                    }
                    Err(e) if e.is_unique_violation() => {
                        self.client
                            .batch_execute("ROLLBACK TO SAVEPOINT headwater_direct_copy; RELEASE SAVEPOINT headwater_direct_copy")
                            .await
                            .map_err(|e| pg_err("ROLLBACK TO SAVEPOINT", e))?;
                        tracing::debug!(table = %table, "keys exist: merging from now on");
                        self.merge_only.insert(table.to_owned());
                    }
                    Err(e) => return Err(e.into_connect()),
                }
            }
            let stage = self.stage(table, &names).await?;
            self.copy_into(
                &stage,
                &names,
                encodings.as_deref(),
                rows.iter()
                    .map(|r| cols.iter().copied().zip(r.iter()).collect()),
            )
            .await
            .map_err(CopyError::into_connect)?;
            let always = self.cfg.quote_identifiers;
            let q = quote_table(table, always);
            let list: Vec<String> = names.iter().map(|c| quote(c, always)).collect();
            let key: Vec<String> = shape
                .key
                .iter()
                .map(|&i| quote(&shape.columns[i].name, always))
                .collect();
            let non_key: Vec<&String> = list.iter().filter(|c| !key.contains(c)).collect();
            let sql = match (self.cfg.insert_mode, key.is_empty()) {
                (InsertMode::Insert, _) | (_, true) => format!(
                    "INSERT INTO {q} ({0}) SELECT {0} FROM {stage}",
                    list.join(", ")
                ),
                (InsertMode::Upsert, false) => {
                    let action = if non_key.is_empty() {
                        "DO NOTHING".to_owned()
                    } else {
                        format!(
                            "DO UPDATE SET {}",
                            non_key
                                .iter()
                                .map(|c| format!("{c} = EXCLUDED.{c}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    };
                    format!(
                        "INSERT INTO {q} ({0}) SELECT {0} FROM {stage} ON CONFLICT ({1}) {action}",
                        list.join(", "),
                        key.join(", ")
                    )
                }
                (InsertMode::Update, false) => {
                    if non_key.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "UPDATE {q} AS t SET {} FROM {stage} AS s WHERE {}",
                            non_key
                                .iter()
                                .map(|c| format!("{c} = s.{c}"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            key.iter()
                                .map(|c| format!("t.{c} = s.{c}"))
                                .collect::<Vec<_>>()
                                .join(" AND ")
                        )
                    }
                }
            };
            if !sql.is_empty() {
                self.client
                    .batch_execute(&format!("{sql}; TRUNCATE {stage}"))
                    .await
                    .map_err(|e| pg_err(&format!("writing to {table}"), e))?;
            } else {
                self.client
                    .batch_execute(&format!("TRUNCATE {stage}"))
                    .await
                    .map_err(|e| pg_err("emptying a staging table", e))?;
            }
        }
        Ok(())
    }
}
