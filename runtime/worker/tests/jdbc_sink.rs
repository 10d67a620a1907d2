//! PostgreSQL source -> embedded log -> JDBC sink into a second PostgreSQL database and into
//! MariaDB, through the `headwater` binary, with the sink connector JSON users write for
//! Debezium's JdbcSinkConnector.
//!
//! What it proves: after a snapshot, inserts, updates (also of rows with a large TOASTed column
//! left unchanged, so the source sends the placeholder), primary-key changes, deletes, a
//! composite-key table and two worker SIGKILLs with restarts, each destination table equals its
//! source table row by row (values normalised to text the same way on both sides), and every
//! sink's offsets table says where it stands. The PostgreSQL destination binds tables by
//! `${source.table}` and so reads envelopes' `source` blocks (and its COPYs go binary); the
//! MariaDB one by `${topic}`, so it reads only `op` and `after` (the converter skips the rest).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{wait_until, Worker};
use headwater_tests::{MariaDbServer, PostgresServer};
use mysql_async::prelude::Queryable;

const SOURCE_DB: &str = "shop";
const SINK_DB: &str = "warehouse";

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Rows of the source (or PostgreSQL destination) tables as normalised text.
async fn pg_rows(client: &tokio_postgres::Client) -> Vec<String> {
    let mut out = Vec::new();
    for r in client
        .query(
            "SELECT concat_ws('|', id, customer_id, amount::text, status,
                    to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'),
                    to_char(shipped_on, 'YYYY-MM-DD'), CASE WHEN paid THEN 1 ELSE 0 END,
                    encode(digest_bytes, 'hex'), md5(coalesce(note, '')), length(note))
               FROM orders ORDER BY id",
            &[],
        )
        .await
        .unwrap_or_default()
    {
        out.push(format!("orders {}", r.get::<_, String>(0)));
    }
    for r in client
        .query(
            "SELECT concat_ws('|', order_id, line, sku, qty) FROM order_items ORDER BY order_id, line",
            &[],
        )
        .await
        .unwrap_or_default()
    {
        out.push(format!("items {}", r.get::<_, String>(0)));
    }
    out
}

async fn maria_rows(conn: &mut mysql_async::Conn) -> Vec<String> {
    let mut out = Vec::new();
    let orders: Vec<String> = conn
        .query(
            "SELECT concat_ws('|', id, customer_id, CAST(amount AS CHAR), status,
                    DATE_FORMAT(created_at, '%Y-%m-%d %H:%i:%s.%f'), DATE_FORMAT(shipped_on, '%Y-%m-%d'),
                    IF(paid, 1, 0), LOWER(HEX(digest_bytes)), MD5(COALESCE(note, '')), CHAR_LENGTH(note))
               FROM shop_public_orders ORDER BY id",
        )
        .await
        .unwrap_or_default();
    out.extend(orders.into_iter().map(|r| format!("orders {r}")));
    let items: Vec<String> = conn
        .query("SELECT concat_ws('|', order_id, line, sku, qty) FROM shop_public_order_items ORDER BY order_id, line")
        .await
        .unwrap_or_default();
    out.extend(items.into_iter().map(|r| format!("items {r}")));
    out
}

fn write_json(path: &Path, value: serde_json::Value) {
    std::fs::write(path, value.to_string()).unwrap();
}

#[test]
fn postgres_to_postgres_and_mariadb_tables_end_equal_after_crashes() {
    let rt = rt();
    let pg = PostgresServer::start().expect("PostgreSQL");
    let maria = MariaDbServer::start().expect("MariaDB");
    rt.block_on(pg.create_database(SOURCE_DB)).unwrap();
    rt.block_on(pg.create_database(SINK_DB)).unwrap();
    rt.block_on(maria.create_database(SINK_DB)).unwrap();
    let src = rt.block_on(pg.connect(SOURCE_DB)).unwrap();
    rt.block_on(src.batch_execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, amount numeric(12,2),
            status text NOT NULL, created_at timestamptz NOT NULL, shipped_on date, paid boolean NOT NULL,
            digest_bytes bytea, note text);
         CREATE TABLE order_items (order_id bigint, line int, sku varchar(24) NOT NULL, qty int NOT NULL,
            PRIMARY KEY (order_id, line));
         INSERT INTO orders
           SELECT g, g % 97, (g * 1.25)::numeric(12,2), 'new', timestamptz '2026-01-01 00:00:00+00' + g * interval '1 minute',
                  date '2026-02-01' + g, g % 2 = 0, decode(md5(g::text), 'hex'),
                  CASE WHEN g % 10 = 0
                       THEN (SELECT string_agg(md5(g::text || x::text), '') FROM generate_series(1, 200) x)
                       ELSE 'short note ' || g END
             FROM generate_series(1, 400) g;
         INSERT INTO order_items SELECT g / 3 + 1, g % 3, 'sku-' || g, g FROM generate_series(0, 299) g;",
    ))
    .unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let source = tmp.path().join("source.json");
    write_json(
        &source,
        serde_json::json!({"name": "shop-source", "config": {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": "127.0.0.1", "database.port": pg.port().to_string(),
            "database.user": "postgres", "database.dbname": SOURCE_DB, "topic.prefix": "shop",
            "table.include.list": "public.orders,public.order_items", "slot.name": "shop_slot",
            "plugin.name": "pgoutput",
            "column.propagate.source.type": "public.order_items.sku"}}),
    );
    // The PostgreSQL sink names tables after source.table (so it reads the envelope's source
    // block); the MariaDB one after the topic (so it reads only op and after).
    let sink = |name: &str, url: String, user: &str, table_format: &str| {
        serde_json::json!({"name": name, "config": {
            "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
            "topics.regex": "shop\\.public\\..*",
            "connection.url": url, "connection.username": user,
            "insert.mode": "upsert", "primary.key.mode": "record_key", "delete.enabled": "true",
            "schema.evolution": "basic", "collection.name.format": table_format}})
    };
    let pg_sink = tmp.path().join("pg-sink.json");
    write_json(
        &pg_sink,
        sink(
            "warehouse-pg",
            format!("jdbc:postgresql://127.0.0.1:{}/{SINK_DB}", pg.port()),
            "postgres",
            "${source.table}",
        ),
    );
    let maria_sink = tmp.path().join("maria-sink.json");
    write_json(
        &maria_sink,
        sink(
            "warehouse-maria",
            format!("jdbc:mariadb://127.0.0.1:{}/{SINK_DB}", maria.port()),
            "root",
            "${topic}",
        ),
    );
    let files = [source.as_path(), pg_sink.as_path(), maria_sink.as_path()];

    let dst = rt.block_on(pg.connect(SINK_DB)).unwrap();
    let mut mdb = rt.block_on(maria.connect(SINK_DB)).unwrap();
    let equal = |rt: &tokio::runtime::Runtime, mdb: &mut mysql_async::Conn| {
        let want = rt.block_on(pg_rows(&src));
        let pg_got = rt.block_on(pg_rows(&dst));
        let maria_got = rt.block_on(maria_rows(mdb));
        (want.clone() == pg_got, want == maria_got, want.len())
    };

    let w = Worker::start(&data, &files);
    wait_until(
        "the snapshot in both destinations",
        Duration::from_secs(120),
        || {
            let (a, b, _) = equal(&rt, &mut mdb);
            a && b
        },
    );

    // Changes, with two SIGKILLs in between.
    let changes = [
        "UPDATE orders SET status = 'paid', paid = true WHERE id % 7 = 0",
        // Rows with a large note: only other columns change, the note is unchanged TOAST.
        "UPDATE orders SET amount = amount + 1 WHERE id % 10 = 0",
        "DELETE FROM orders WHERE id % 11 = 0",
        "INSERT INTO orders SELECT g, 1, 9.99, 'new', now(), NULL, false, NULL, NULL FROM generate_series(1001, 1100) g",
        // Primary-key change: a delete of the old key and a create of the new one.
        "UPDATE orders SET id = id + 5000 WHERE id BETWEEN 380 AND 389",
        "UPDATE order_items SET qty = qty * 10 WHERE line = 1",
        "DELETE FROM order_items WHERE order_id % 5 = 0",
        "INSERT INTO order_items VALUES (1001, 0, 'late', 1), (1001, 1, 'later', 2)",
    ];
    let mut w = Some(w);
    for (i, sql) in changes.iter().enumerate() {
        rt.block_on(src.batch_execute(sql)).unwrap();
        if i == 2 || i == 5 {
            std::thread::sleep(Duration::from_millis(300));
            w.take().unwrap().sigkill();
            w = Some(Worker::start(&data, &files));
        }
    }
    // And a burst of small transactions while the worker is killed once more.
    for i in 0..50 {
        rt.block_on(src.execute(
            "UPDATE orders SET customer_id = customer_id + 1 WHERE id = $1",
            &[&(i64::from(i) * 3 + 1)],
        ))
        .unwrap();
        if i == 25 {
            w.take().unwrap().sigkill();
            w = Some(Worker::start(&data, &files));
        }
    }
    let mut last = (false, false, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        last = equal(&rt, &mut mdb);
        if last.0 && last.1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if !(last.0 && last.1) {
        let want = rt.block_on(pg_rows(&src));
        for (name, got) in [
            ("postgres", rt.block_on(pg_rows(&dst))),
            ("mariadb", rt.block_on(maria_rows(&mut mdb))),
        ] {
            let missing: Vec<&String> = want.iter().filter(|r| !got.contains(r)).take(5).collect();
            let extra: Vec<&String> = got.iter().filter(|r| !want.contains(r)).take(5).collect();
            eprintln!(
                "{name}: {} rows vs {}; missing {missing:#?}; extra {extra:#?}",
                got.len(),
                want.len()
            );
        }
        let w = w.as_ref().unwrap();
        for c in ["shop-source", "warehouse-pg", "warehouse-maria"] {
            eprintln!(
                "{c}: {}",
                w.call("GET", &format!("/connectors/{c}/status"), None).2
            );
        }
        for l in w
            .logs()
            .iter()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        {
            eprintln!("{l}");
        }
        panic!("destinations differ from the source");
    }
    assert!(last.2 > 700, "rows compared: {}", last.2);

    // The sinks sized the column the source propagated (column.propagate.source.type).
    let pg_length: Option<i32> = rt
        .block_on(dst.query_one(
            "SELECT character_maximum_length FROM information_schema.columns
              WHERE table_name = 'order_items' AND column_name = 'sku'",
            &[],
        ))
        .unwrap()
        .get(0);
    assert_eq!(pg_length, Some(24));
    let maria_type: Option<String> = rt
        .block_on(mdb.query_first(
            "SELECT column_type FROM information_schema.columns
              WHERE table_schema = DATABASE() AND column_name = 'sku'",
        ))
        .unwrap();
    assert_eq!(maria_type.as_deref(), Some("varchar(24)"));

    // The offsets tables say where each sink stands.
    let n: i64 = rt
        .block_on(dst.query_one(
            "SELECT count(*) FROM headwater_sink_offsets WHERE connector = 'warehouse-pg'",
            &[],
        ))
        .unwrap()
        .get(0);
    assert_eq!(n, 2, "one row per consumed topic partition");
    let m: Option<i64> = rt
        .block_on(mdb.query_first(
            "SELECT COUNT(*) FROM headwater_sink_offsets WHERE connector = 'warehouse-maria'",
        ))
        .unwrap();
    assert_eq!(m, Some(2));
    let w = w.take().unwrap();
    let (code, _, status) = w.call("GET", "/connectors/warehouse-pg/status", None);
    assert_eq!(code, 200);
    assert_eq!(status["type"], "sink");
    assert_eq!(status["tasks"][0]["state"], "RUNNING");
    w.sigterm();
}
