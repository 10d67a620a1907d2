//! The PostgreSQL writer against a real server when a destination column's type changes while
//! the task runs: the writer knows the table's column types (it picks binary COPY encodings
//! from them), so a batch after `ALTER TABLE ... ALTER COLUMN ... TYPE` must look them up
//! again and write values the new column takes (here: a decimal into a column turned `text`,
//! an int32 into a column turned `bigint`), never bytes encoded for the old type.

use std::sync::Arc;

use headwater_api::logical::decimal;
use headwater_api::{Headers, Schema, SchemaBuilder, SchemaRef, SinkRecord, Struct, Value};
use headwater_connector_jdbc::batch::plan;
use headwater_connector_jdbc::change::{change_of, ShapeCache};
use headwater_connector_jdbc::config::JdbcSinkConfig;
use headwater_connector_jdbc::postgres::PgWriter;
use headwater_tests::PostgresServer;

fn record(
    key_schema: &SchemaRef,
    value_schema: &SchemaRef,
    offset: i64,
    id: i64,
    qty: i32,
    price: i128,
) -> SinkRecord {
    let key = Struct::new(key_schema.clone()).unwrap().with("id", id);
    let value = Struct::new(value_schema.clone())
        .unwrap()
        .with("id", id)
        .with("qty", Value::Int32(qty))
        .with("price", Value::Bytes(decimal::unscaled_from_i128(price)));
    SinkRecord {
        topic: "items".into(),
        original_topic: "items".into(),
        partition: 0,
        offset,
        timestamp: 0,
        key_schema: Some(key_schema.clone()),
        key: Value::Struct(key),
        value_schema: Some(value_schema.clone()),
        value: Value::Struct(value),
        headers: Headers::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_column_type_is_looked_up_again() {
    let pg = PostgresServer::start().unwrap();
    pg.create_database("dest").await.unwrap();
    let admin = pg.connect("dest").await.unwrap();
    let url = format!("jdbc:postgresql://127.0.0.1:{}/dest", pg.port());
    let props = headwater_api::properties(&[
        ("connection.url", url.as_str()),
        ("connection.username", pg.user()),
        ("insert.mode", "upsert"),
        ("primary.key.mode", "record_key"),
        ("schema.evolution", "basic"),
    ]);
    let cfg = Arc::new(JdbcSinkConfig::parse(&props).unwrap());
    let mut writer = PgWriter::connect(cfg.clone(), "types").await.unwrap();
    let mut shapes = ShapeCache::default();
    let key_schema = SchemaBuilder::struct_()
        .field("id", Schema::int64())
        .build_ref();
    let value_schema = SchemaBuilder::struct_()
        .field("id", Schema::int64())
        .field("qty", Schema::int32())
        .field("price", decimal::builder(2).build_ref())
        .build_ref();
    let mut write = |records: Vec<SinkRecord>| {
        let changes = records
            .into_iter()
            .filter_map(|r| change_of(&cfg, &mut shapes, r).unwrap())
            .collect();
        plan(changes, true)
    };

    // The table is created (schema evolution) and written with binary COPY.
    let first = write(vec![
        record(&key_schema, &value_schema, 0, 1, 5, 1234),
        record(&key_schema, &value_schema, 1, 2, 6, -99),
    ]);
    writer.write(first, &[]).await.unwrap();

    // Someone changes two column types while the sink runs.
    admin
        .batch_execute(
            "ALTER TABLE items ALTER COLUMN price TYPE text;
             ALTER TABLE items ALTER COLUMN qty TYPE bigint",
        )
        .await
        .unwrap();
    let second = write(vec![
        record(&key_schema, &value_schema, 2, 2, 7, 5678),
        record(&key_schema, &value_schema, 3, 3, 2_000_000_000, 1),
    ]);
    writer.write(second, &[]).await.unwrap();

    let rows: Vec<(i64, i64, String)> = admin
        .query("SELECT id, qty, price FROM items ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        vec![
            (1, 5, "12.34".to_owned()),
            (2, 7, "56.78".to_owned()),
            (3, 2_000_000_000, "0.01".to_owned()),
        ]
    );
}
