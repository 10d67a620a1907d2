//! Writing to MySQL and MariaDB: one transaction per batch that applies the batch's steps and
//! upserts the consumed offsets into the offsets table, so rows and offsets commit together.
//!
//! Rows travel as multi-row statements with parameters (`batch.size` rows each, fewer when the
//! 65,535-parameter limit needs it): `INSERT ... ON DUPLICATE KEY UPDATE` (upsert), `INSERT`
//! (insert), `UPDATE` per row (update), `DELETE ... WHERE (key) IN (...)` (deletes). Values are
//! sent as text (or raw bytes) that the server converts to the column type. A row whose columns
//! are partly unchanged (TOAST) is written with only the columns it has.
//!
//! Invariants: as for PostgreSQL (see `crate::postgres`); the tables must be InnoDB (or another
//! transactional engine) for the rows and offsets to commit atomically.

use std::collections::HashMap;
use std::sync::Arc;

use headwater_api::{ConnectError, TopicPartition, Value};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Params};

use crate::batch::{group_by_columns, ColumnGroup, Step, TablePlan, UpsertRow};
use crate::change::{Column, Shape};
use crate::config::{DatabaseKind, DestinationTls, InsertMode, JdbcSinkConfig};
use crate::values::render;

/// MySQL's limit on parameters per statement.
const MAX_PARAMS: usize = 65_535;

fn my_err(context: &str, e: mysql_async::Error) -> ConnectError {
    let msg = format!("{context}: {e}");
    // The TLS the URL asks for cannot be had: retrying will not help.
    if matches!(
        e,
        mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer)
    ) {
        return ConnectError::config(format!(
            "{msg}; the server does not accept TLS connections, and the URL's sslMode asks for TLS"
        ));
    }
    if msg.contains("invalid peer certificate") {
        return ConnectError::config(format!(
            "{msg}; the server's certificate failed the check the URL's sslMode asks for"
        ));
    }
    let retriable = match &e {
        mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => true,
        // Deadlock, lock wait timeout, server shutdown / gone.
        mysql_async::Error::Server(s) => matches!(s.code, 1213 | 1205 | 1053 | 2006 | 2013),
        _ => false,
    };
    if retriable {
        ConnectError::retriable(msg)
    } else {
        ConnectError::fatal(msg)
    }
}

fn quote(name: &str) -> String {
    crate::sql::quote(DatabaseKind::MySql, name, true)
}

fn quote_table(name: &str) -> String {
    crate::sql::quote_table(DatabaseKind::MySql, name, true)
}

pub struct MySqlWriter {
    conn: Conn,
    cfg: Arc<JdbcSinkConfig>,
    connector: String,
    tables: HashMap<String, Vec<String>>,
}

fn param(col: &Column, value: &Value) -> Result<mysql_async::Value, ConnectError> {
    let mut out = Vec::new();
    if render(DatabaseKind::MySql, &col.name, &col.schema, value, &mut out)? {
        Ok(mysql_async::Value::Bytes(out))
    } else {
        Ok(mysql_async::Value::NULL)
    }
}

impl MySqlWriter {
    pub async fn connect(
        cfg: Arc<JdbcSinkConfig>,
        connector: &str,
    ) -> Result<MySqlWriter, ConnectError> {
        let d = &cfg.destination;
        let tls = match &d.tls {
            DestinationTls::MySql(t) => t.clone(),
            DestinationTls::Postgres(_) => headwater_connector_mysql::tls::TlsSettings::disabled(),
        };
        let ssl = tls.ssl_opts();
        if ssl.is_some() {
            headwater_connector_mysql::tls::install_crypto_provider();
        }
        let opts = OptsBuilder::default()
            .ip_or_hostname(d.host.clone())
            .tcp_port(d.port)
            .user(Some(cfg.username.clone()))
            .pass(cfg.password.clone())
            .db_name(Some(d.database.clone()))
            .ssl_opts(ssl);
        let connected = match Conn::new(opts.clone()).await {
            // PREFERRED: a server without TLS is written to in plain TCP.
            Err(mysql_async::Error::Driver(
                mysql_async::DriverError::NoClientSslFlagFromServer,
            )) if tls.mode == headwater_connector_mysql::tls::SslMode::Preferred => {
                Conn::new(opts.ssl_opts(None)).await
            }
            other => other,
        };
        let mut conn = connected.map_err(|e| {
            my_err(
                &format!(
                    "connecting to MySQL/MariaDB at {}:{}/{}",
                    d.host, d.port, d.database
                ),
                e,
            )
        })?;
        // UTC for temporal values; strict mode so a bad value fails instead of being mangled.
        conn.query_drop(
            "SET time_zone = '+00:00', sql_mode = CONCAT(@@sql_mode, ',STRICT_TRANS_TABLES')",
        )
        .await
        .map_err(|e| my_err("setting the session", e))?;
        let table = quote_table(&cfg.offsets_table);
        conn.query_drop(format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                connector varchar(255) NOT NULL,
                topic varchar(255) NOT NULL,
                kafka_partition int NOT NULL,
                next_offset bigint NOT NULL,
                updated_at timestamp(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
                PRIMARY KEY (connector, topic, kafka_partition)) ENGINE=InnoDB"
        ))
        .await
        .map_err(|e| my_err(&format!("creating the offsets table {table}"), e))?;
        Ok(MySqlWriter {
            conn,
            cfg,
            connector: connector.to_owned(),
            tables: HashMap::new(),
        })
    }

    pub async fn stored_offsets(&mut self) -> Result<Vec<(TopicPartition, i64)>, ConnectError> {
        let table = quote_table(&self.cfg.offsets_table);
        let rows: Vec<(String, i32, i64)> = self
            .conn
            .exec(
                format!(
                    "SELECT topic, kafka_partition, next_offset FROM {table} WHERE connector = ?"
                ),
                (self.connector.clone(),),
            )
            .await
            .map_err(|e| my_err("reading the sink offsets", e))?;
        Ok(rows
            .into_iter()
            .map(|(t, p, o)| (TopicPartition::new(t, p as u32), o))
            .collect())
    }

    pub async fn write(
        &mut self,
        plans: Vec<(String, TablePlan)>,
        next_offsets: &[(TopicPartition, i64)],
    ) -> Result<(), ConnectError> {
        // DDL commits implicitly in MySQL, so every table is created or extended before the
        // batch's transaction starts.
        for (table, plan) in &plans {
            for step in &plan.steps {
                if let Step::Upserts(rows) = step {
                    let mut seen: Vec<&Arc<Shape>> = Vec::new();
                    for UpsertRow { shape, .. } in rows {
                        if !seen
                            .iter()
                            .any(|s| Arc::ptr_eq(s, shape) || ***s == **shape)
                        {
                            seen.push(shape);
                            self.ensure_table(table, shape).await?;
                        }
                    }
                }
            }
        }
        self.conn
            .query_drop("START TRANSACTION")
            .await
            .map_err(|e| my_err("START TRANSACTION", e))?;
        match self.write_in_transaction(plans, next_offsets).await {
            Ok(()) => self
                .conn
                .query_drop("COMMIT")
                .await
                .map_err(|e| my_err("COMMIT", e)),
            Err(e) => {
                let _ = self.conn.query_drop("ROLLBACK").await;
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
            self.carry_unchanged(&table, &mut plan).await?;
            for step in plan.steps {
                match step {
                    Step::Truncate => {
                        if self.table_columns(&table).await?.is_some() {
                            // TRUNCATE commits implicitly in MySQL; DELETE keeps the transaction.
                            let q = quote_table(&table);
                            self.conn
                                .query_drop(format!("DELETE FROM {q}"))
                                .await
                                .map_err(|e| my_err(&format!("truncating {q}"), e))?;
                        }
                    }
                    Step::Deletes(shape, keys) => self.delete(&table, &shape, keys).await?,
                    Step::Upserts(rows) => self.upsert(&table, rows).await?,
                }
            }
        }
        if !next_offsets.is_empty() {
            let table = quote_table(&self.cfg.offsets_table);
            let mut sql = format!(
                "INSERT INTO {table} (connector, topic, kafka_partition, next_offset) VALUES "
            );
            let mut params = Vec::new();
            for (i, (tp, o)) in next_offsets.iter().enumerate() {
                if i > 0 {
                    sql.push(',');
                }
                sql.push_str("(?,?,?,?)");
                params.push(mysql_async::Value::from(self.connector.clone()));
                params.push(mysql_async::Value::from(tp.topic.clone()));
                params.push(mysql_async::Value::from(tp.partition as i64));
                params.push(mysql_async::Value::from(*o));
            }
            sql.push_str(
                " ON DUPLICATE KEY UPDATE next_offset = VALUES(next_offset), updated_at = CURRENT_TIMESTAMP(6)",
            );
            self.conn
                .exec_drop(sql, Params::Positional(params))
                .await
                .map_err(|e| my_err("storing the sink offsets", e))?;
        }
        Ok(())
    }

    /// As for PostgreSQL (`crate::postgres`): the unchanged columns of a key change's create
    /// half come from the old row, read raw and written back as they are.
    async fn carry_unchanged(
        &mut self,
        table: &str,
        plan: &mut TablePlan,
    ) -> Result<(), ConnectError> {
        for step in &mut plan.steps {
            let Step::Upserts(rows) = step else { continue };
            for row in rows.iter_mut() {
                let Some((sql, old_key, carried)) =
                    crate::sql::carry_query(DatabaseKind::MySql, true, table, row)
                else {
                    continue;
                };
                if self.table_columns(table).await?.is_none() {
                    continue;
                }
                let params: Vec<mysql_async::Value> =
                    old_key.into_iter().map(mysql_async::Value::from).collect();
                let found: Option<mysql_async::Row> = self
                    .conn
                    .exec_first(sql, Params::Positional(params))
                    .await
                    .map_err(|e| {
                        my_err(
                            &format!("reading the old row of a key change in {table}"),
                            e,
                        )
                    })?;
                let Some(found) = found else { continue };
                let values = (0..carried.len())
                    .map(|j| match found.get(j).unwrap_or(mysql_async::Value::NULL) {
                        mysql_async::Value::Bytes(b) => Value::Bytes(b),
                        mysql_async::Value::NULL => Value::Null,
                        other => {
                            Value::Bytes(other.as_sql(true).trim_matches('\'').as_bytes().to_vec())
                        }
                    })
                    .collect();
                crate::sql::fill_carried(
                    row,
                    &carried,
                    values,
                    crate::sql::carried_schema(DatabaseKind::MySql),
                );
            }
        }
        Ok(())
    }

    async fn table_columns(&mut self, table: &str) -> Result<Option<Vec<String>>, ConnectError> {
        if let Some(c) = self.tables.get(table) {
            return Ok(Some(c.clone()));
        }
        let (schema, name) = match table.split_once('.') {
            Some((s, t)) => (Some(s.to_owned()), t.to_owned()),
            None => (None, table.to_owned()),
        };
        let cols: Vec<String> = self
            .conn
            .exec(
                "SELECT column_name FROM information_schema.columns
                  WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?
                  ORDER BY ordinal_position",
                (schema, name),
            )
            .await
            .map_err(|e| my_err(&format!("looking up table {table}"), e))?;
        if cols.is_empty() {
            return Ok(None);
        }
        self.tables.insert(table.to_owned(), cols.clone());
        Ok(Some(cols))
    }

    async fn ensure_table(&mut self, table: &str, shape: &Shape) -> Result<(), ConnectError> {
        // DDL commits implicitly in MySQL: `write` runs this before the batch's transaction.
        let existing = self.table_columns(table).await?;
        let evolution = crate::sql::evolution(
            DatabaseKind::MySql,
            true,
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
            self.conn.query_drop(ddl).await.map_err(|e| {
                let what = column.map_or(format!("creating table {table}"), |c| {
                    format!("adding column {c} to {table}")
                });
                my_err(&what, e)
            })?;
        }
        self.tables.remove(table);
        Ok(())
    }

    async fn delete(
        &mut self,
        table: &str,
        shape: &Shape,
        keys: Vec<Vec<Value>>,
    ) -> Result<(), ConnectError> {
        if self.table_columns(table).await?.is_none() {
            return Ok(());
        }
        let key_cols: Vec<&Column> = shape.key.iter().map(|&i| &shape.columns[i]).collect();
        let names: Vec<String> = key_cols.iter().map(|c| quote(&c.name)).collect();
        let per = (MAX_PARAMS / names.len().max(1))
            .min(self.cfg.batch_size)
            .max(1);
        let q = quote_table(table);
        for chunk in keys.chunks(per) {
            let tuple = format!("({})", vec!["?"; names.len()].join(","));
            let sql = format!(
                "DELETE FROM {q} WHERE ({}) IN ({})",
                names.join(", "),
                vec![tuple; chunk.len()].join(",")
            );
            let mut params = Vec::with_capacity(chunk.len() * names.len());
            for k in chunk {
                for (c, v) in key_cols.iter().zip(k) {
                    params.push(param(c, v)?);
                }
            }
            self.conn
                .exec_drop(sql, Params::Positional(params))
                .await
                .map_err(|e| my_err(&format!("deleting from {table}"), e))?;
        }
        Ok(())
    }

    async fn upsert(&mut self, table: &str, rows: Vec<UpsertRow>) -> Result<(), ConnectError> {
        let q = quote_table(table);
        for ColumnGroup {
            shape,
            present,
            rows,
        } in group_by_columns(rows)
        {
            let cols: Vec<&Column> = present.iter().map(|&i| &shape.columns[i]).collect();
            let names: Vec<String> = cols.iter().map(|c| quote(&c.name)).collect();
            let key: Vec<String> = shape
                .key
                .iter()
                .map(|&i| quote(&shape.columns[i].name))
                .collect();
            let non_key: Vec<&String> = names.iter().filter(|c| !key.contains(c)).collect();
            if self.cfg.insert_mode == InsertMode::Update && !key.is_empty() {
                if non_key.is_empty() {
                    continue;
                }
                let sql = format!(
                    "UPDATE {q} SET {} WHERE {}",
                    non_key
                        .iter()
                        .map(|c| format!("{c} = ?"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    key.iter()
                        .map(|c| format!("{c} = ?"))
                        .collect::<Vec<_>>()
                        .join(" AND ")
                );
                let mut all = Vec::with_capacity(rows.len());
                for r in &rows {
                    let mut p = Vec::new();
                    for (c, v) in cols.iter().zip(r) {
                        if !key.contains(&quote(&c.name)) {
                            p.push(param(c, v)?);
                        }
                    }
                    for (c, v) in cols.iter().zip(r) {
                        if key.contains(&quote(&c.name)) {
                            p.push(param(c, v)?);
                        }
                    }
                    all.push(Params::Positional(p));
                }
                self.conn
                    .exec_batch(sql, all)
                    .await
                    .map_err(|e| my_err(&format!("updating {table}"), e))?;
                continue;
            }
            let per = (MAX_PARAMS / names.len().max(1))
                .min(self.cfg.batch_size)
                .max(1);
            let tuple = format!("({})", vec!["?"; names.len()].join(","));
            let on_dup = match (self.cfg.insert_mode, key.is_empty()) {
                (InsertMode::Upsert, false) if non_key.is_empty() => {
                    // Only key columns: make a duplicate a no-op.
                    format!(" ON DUPLICATE KEY UPDATE {0} = {0}", key[0])
                }
                (InsertMode::Upsert, false) => format!(
                    " ON DUPLICATE KEY UPDATE {}",
                    non_key
                        .iter()
                        .map(|c| format!("{c} = VALUES({c})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => String::new(),
            };
            for chunk in rows.chunks(per) {
                let sql = format!(
                    "INSERT INTO {q} ({}) VALUES {}{on_dup}",
                    names.join(", "),
                    vec![tuple.as_str(); chunk.len()].join(",")
                );
                let mut params = Vec::with_capacity(chunk.len() * names.len());
                for r in chunk {
                    for (c, v) in cols.iter().zip(r) {
                        params.push(param(c, v)?);
                    }
                }
                self.conn
                    .exec_drop(sql, Params::Positional(params))
                    .await
                    .map_err(|e| my_err(&format!("writing to {table}"), e))?;
            }
        }
        Ok(())
    }
}
