//! The binary COPY encodings against a real PostgreSQL, differentially: the same Connect
//! values are COPYed once in the text format (as the writer renders them) and once in the
//! binary format (as [`pgbinary`] encodes them) into two tables of the same column types,
//! and PostgreSQL's text output of both tables must be identical row by row. Every column type
//! with a binary encoding is covered, with edge values (extremes, NaN and infinities, negative
//! and very wide decimals, dates and timestamps before 1970 and 2000, offsets, `infinity`,
//! text that needs COPY escaping, NULLs), plus a domain column (resolved to its base type).

use headwater_api::logical::{debezium, decimal};
use headwater_api::{Schema, SchemaBuilder, SchemaRef, SchemaType, Struct, Value};
use headwater_connector_jdbc::config::DatabaseKind;
use headwater_connector_jdbc::pgbinary::{self, BinaryEncoding};
use headwater_connector_jdbc::values::{copy_escape, render};
use headwater_tests::PostgresServer;

use bytes::Bytes;
use futures_util::SinkExt;

struct Col {
    name: &'static str,
    sql: &'static str,
    schema: SchemaRef,
}

fn col(name: &'static str, sql: &'static str, schema: impl Into<SchemaRef>) -> Col {
    Col {
        name,
        sql,
        schema: schema.into(),
    }
}

fn named(name: &str, base: SchemaType) -> Schema {
    debezium::builder(name, base).build()
}

fn columns() -> Vec<Col> {
    vec![
        col("id", "bigint PRIMARY KEY", Schema::int64()),
        col("i2", "smallint", Schema::int16()),
        col("i2_from_i8", "smallint", Schema::int8()),
        col("i4", "integer", Schema::int32()),
        col("i8_from_i4", "bigint", Schema::int32()),
        col("f4", "real", Schema::float32()),
        col("f8", "double precision", Schema::float64()),
        col("f8_from_f4", "double precision", Schema::float32()),
        col("flag", "boolean", Schema::boolean()),
        col("t", "text", Schema::string()),
        col("vc", "varchar(40)", Schema::string()),
        col("bp", "char(6)", Schema::string()),
        col("js", "json", named(debezium::JSON, SchemaType::String)),
        col("jb", "jsonb", named(debezium::JSON, SchemaType::String)),
        col("bin", "bytea", Schema::bytes()),
        col("dec4", "numeric(30,4)", decimal::builder(4).build()),
        col("dec0", "numeric", decimal::builder(0).build()),
        col("dec_neg_scale", "numeric", decimal::builder(-3).build()),
        col(
            "dec_var",
            "numeric",
            debezium::variable_scale_decimal_builder().build(),
        ),
        col("d", "date", named(debezium::DATE, SchemaType::Int32)),
        col(
            "d_connect",
            "date",
            SchemaBuilder::int32()
                .name("org.apache.kafka.connect.data.Date")
                .build(),
        ),
        col("tm_ms", "time(3)", named(debezium::TIME, SchemaType::Int32)),
        col(
            "tm_us",
            "time(6)",
            named(debezium::MICRO_TIME, SchemaType::Int64),
        ),
        col(
            "tm_ns",
            "time(6)",
            named(debezium::NANO_TIME, SchemaType::Int64),
        ),
        col(
            "ts_ms",
            "timestamp(6)",
            named(debezium::TIMESTAMP, SchemaType::Int64),
        ),
        col(
            "ts_us",
            "timestamp(6)",
            named(debezium::MICRO_TIMESTAMP, SchemaType::Int64),
        ),
        col(
            "ts_ns",
            "timestamp(6)",
            named(debezium::NANO_TIMESTAMP, SchemaType::Int64),
        ),
        col(
            "tz",
            "timestamptz",
            named(debezium::ZONED_TIMESTAMP, SchemaType::String),
        ),
        col(
            "tz3",
            "timestamptz(3)",
            named(debezium::ZONED_TIMESTAMP, SchemaType::String),
        ),
        col(
            "iv",
            "interval",
            named(debezium::MICRO_DURATION, SchemaType::Int64),
        ),
        col("u", "uuid", named(debezium::UUID, SchemaType::String)),
        col("dom", "positive_int", Schema::int32()),
    ]
}

fn dec(unscaled: i128) -> Value {
    Value::Bytes(decimal::unscaled_from_i128(unscaled))
}

fn var_dec(scale: i32, unscaled: i128) -> Value {
    let schema = SchemaRef::new(debezium::variable_scale_decimal_builder().build());
    Value::Struct(
        Struct::new(schema)
            .unwrap()
            .with("scale", Value::Int32(scale))
            .with("value", dec(unscaled)),
    )
}

fn s(text: &str) -> Value {
    Value::String(text.to_owned())
}

/// Rows of values, one per column of [`columns`].
fn rows() -> Vec<Vec<Value>> {
    let wide = decimal::unscaled_from_str(&format!("-9{}", "8".repeat(44)), 0).unwrap();
    vec![
        vec![
            Value::Int64(1),
            Value::Int16(-32768),
            Value::Int8(-128),
            Value::Int32(i32::MAX),
            Value::Int32(i32::MIN),
            Value::Float32(1.5e-7),
            Value::Float64(std::f64::consts::PI),
            Value::Float32(0.1),
            Value::Boolean(true),
            s("tab\there, newline\nthere, backslash \\ and ünïcödé ✓"),
            s("short"),
            s("ab"),
            s(r#"{"b": 1, "a": [1, 2.50]}"#),
            s(r#"{"b": 1, "a": [1, 2.50], "n": null}"#),
            Value::Bytes(vec![0, 1, 2, 255, b'\\', b'\t']),
            dec(-123_456_789),
            dec(0),
            dec(7),
            var_dec(3, 1_234_567),
            Value::Int32(19_723),
            Value::Int32(-1),
            Value::Int32(45_296_789),
            Value::Int64(86_399_999_999),
            Value::Int64(3_723_000_001_999),
            Value::Int64(1_704_067_200_123),
            Value::Int64(1_704_067_200_123_456),
            Value::Int64(1_704_067_200_123_456_789),
            s("2024-01-01T10:00:00.5Z"),
            s("2024-06-30T23:59:59.123456+02:00"),
            Value::Int64(-90_061_000_001),
            s("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            Value::Int32(42),
        ],
        vec![
            Value::Int64(i64::MIN),
            Value::Int16(32767),
            Value::Int8(127),
            Value::Int32(0),
            Value::Int32(-7),
            Value::Float32(f32::NAN),
            Value::Float64(f64::NEG_INFINITY),
            Value::Float32(f32::INFINITY),
            Value::Boolean(false),
            s(""),
            s("x".repeat(40).as_str()),
            s("abcdef"),
            s("[]"),
            s("\"text\""),
            Value::Bytes(Vec::new()),
            dec(99_999_999_999_999_999_999_999_999_999),
            Value::Bytes(wide),
            dec(-12_345),
            var_dec(0, -5),
            Value::Int32(-719_162),
            Value::Int32(10_957),
            Value::Int32(0),
            Value::Int64(0),
            Value::Int64(-1),
            Value::Int64(-62_135_596_800_000),
            Value::Int64(946_684_799_999_999),
            Value::Int64(-1),
            s("1969-12-31T23:59:59.999999Z"),
            s("infinity"),
            Value::Int64(0),
            s("{A0EEBC999C0B4EF8BB6D6BB9BD380A11}"),
            Value::Int32(1),
        ],
        vec![
            Value::Int64(i64::MAX),
            Value::Int16(0),
            Value::Int8(0),
            Value::Int32(1),
            Value::Int32(1),
            Value::Float32(-0.0),
            Value::Float64(1e308),
            Value::Float32(f32::MIN_POSITIVE),
            Value::Boolean(true),
            s("\\N is not null here"),
            s("é"),
            s(""),
            s("null"),
            s("12.50"),
            Value::Bytes(vec![b'\n'; 3]),
            dec(1),
            dec(100_000_000_000_000_000_000),
            dec(0),
            var_dec(20, 1),
            Value::Int32(2_932_896),
            Value::Int32(-25_567),
            Value::Int32(86_399_999),
            Value::Int64(43_200_000_000),
            Value::Int64(0),
            Value::Int64(253_402_127_999_999),
            Value::Int64(-2_208_988_800_000_000),
            Value::Int64(0),
            s("-infinity"),
            s("2000-02-29T00:00:00.0009999Z"),
            Value::Int64(34_560_000_000_000),
            s("00000000-0000-0000-0000-000000000000"),
            Value::Int32(2_147_483_647),
        ],
    ]
}

async fn copy_text(
    client: &tokio_postgres::Client,
    table: &str,
    cols: &[Col],
    rows: &[Vec<Value>],
) {
    let mut buf = Vec::new();
    let mut text = Vec::new();
    for row in rows {
        for (i, (c, v)) in cols.iter().zip(row).enumerate() {
            if i > 0 {
                buf.push(b'\t');
            }
            text.clear();
            if render(DatabaseKind::Postgres, c.name, &c.schema, v, &mut text).unwrap() {
                copy_escape(&text, &mut buf);
            } else {
                buf.extend_from_slice(b"\\N");
            }
        }
        buf.push(b'\n');
    }
    send_copy(client, &format!("COPY {table} FROM STDIN"), buf)
        .await
        .unwrap();
}

/// A binary COPY stream of `rows`.
fn binary_copy_data(cols: &[Col], encodings: &[BinaryEncoding], rows: &[Vec<Value>]) -> Vec<u8> {
    let mut buf = pgbinary::HEADER.to_vec();
    for row in rows {
        buf.extend_from_slice(&(row.len() as i16).to_be_bytes());
        for ((c, v), e) in cols.iter().zip(row).zip(encodings) {
            pgbinary::encode(*e, c.name, &c.schema, v, &mut buf).unwrap();
        }
    }
    buf.extend_from_slice(pgbinary::TRAILER);
    buf
}

async fn send_copy(
    client: &tokio_postgres::Client,
    statement: &str,
    data: Vec<u8>,
) -> Result<u64, tokio_postgres::Error> {
    let sink = client.copy_in(statement).await?;
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from(data)).await?;
    sink.finish().await
}

async fn table_text(client: &tokio_postgres::Client, table: &str) -> Vec<String> {
    client
        .query(&format!("SELECT r::text FROM {table} r ORDER BY id"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_copy_stores_what_text_copy_stores() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("binary_copy").await.unwrap();
    let client = pg.connect("binary_copy").await.unwrap();
    let cols = columns();
    let ddl: Vec<String> = cols
        .iter()
        .map(|c| format!("{} {}", c.name, c.sql))
        .collect();
    client
        .batch_execute(&format!(
            "SET TimeZone = 'America/New_York';
             CREATE DOMAIN positive_int AS integer CHECK (VALUE > 0);
             CREATE TABLE via_text ({0}); CREATE TABLE via_binary ({0});",
            ddl.join(", ")
        ))
        .await
        .unwrap();
    // The column types as the writer looks them up (domains resolved to their base type).
    let mut encodings = Vec::new();
    for c in &cols {
        let oid: i64 = client
            .query_one(
                "SELECT (CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END)::int8
                   FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                  WHERE a.attrelid = 'via_binary'::regclass AND a.attname = $1",
                &[&c.name],
            )
            .await
            .unwrap()
            .get(0);
        let e = pgbinary::encoding_for(&c.schema, oid as u32)
            .unwrap_or_else(|| panic!("column {} ({}) has no binary encoding", c.name, c.sql));
        encodings.push(e);
    }
    let mut rows = rows();
    // And a row of NULLs (but the key).
    let mut nulls = vec![Value::Null; cols.len()];
    nulls[0] = Value::Int64(0);
    rows.push(nulls);
    copy_text(&client, "via_text", &cols, &rows).await;
    send_copy(
        &client,
        "COPY via_binary FROM STDIN (FORMAT binary)",
        binary_copy_data(&cols, &encodings, &rows),
    )
    .await
    .unwrap();
    let (text, binary) = (
        table_text(&client, "via_text").await,
        table_text(&client, "via_binary").await,
    );
    assert_eq!(text.len(), rows.len());
    assert_eq!(binary.len(), rows.len());
    for (t, b) in text.iter().zip(&binary) {
        assert_eq!(t, b, "text COPY and binary COPY stored different rows");
    }

    // A domain's check constraint still applies to binary values.
    let mut bad_domain = rows[0].clone();
    bad_domain[0] = Value::Int64(100);
    *bad_domain.last_mut().unwrap() = Value::Int32(-1);
    let err = send_copy(
        &client,
        "COPY via_binary FROM STDIN (FORMAT binary)",
        binary_copy_data(&cols, &encodings, &[bad_domain]),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("positive_int")
            || err
                .as_db_error()
                .is_some_and(|d| d.message().contains("positive_int")),
        "{err:?}"
    );
}
