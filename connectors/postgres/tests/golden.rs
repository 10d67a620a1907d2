//! Golden-file test: every captured Debezium 3.6.3 PostgreSQL case under
//! `tests/data/golden/debezium/postgres/` is reproduced against a real PostgreSQL started by
//! the harness. The task is driven directly (as the engine would: poll, then commit the offsets
//! of batches that end on a transaction boundary), records are serialised with the JSON
//! converter, and compared with the captured JSON, ignoring only values that differ per run
//! (timestamps, LSNs, txIds, sequence, the version string, the database name). Captured topics
//! are after RegexRouter `cdc\.public\.(.*)` -> `warehouse.$1`; ours are the unrouted names.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use headwater_api::plugin::{Boundary, SourceTask, SourceTaskContext};
use headwater_api::{OffsetMap, Properties, SourceRecord, Value};
use headwater_connector_postgres::PostgresSourceTask;
use headwater_format::{JsonConverter, JsonConverterConfig};
use headwater_tests::PostgresServer;
use serde_json::Value as Json;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden/debezium/postgres")
}

/// The SQL of each case, from the README (`## NN_case` followed by a ```sql block).
fn case_sql() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(golden_dir().join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut name: Option<String> = None;
    let mut in_sql = false;
    let mut sql = String::new();
    for line in readme.lines() {
        if let Some(n) = line.strip_prefix("## ") {
            if n.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                name = Some(n.trim().to_owned());
            }
        } else if line.trim() == "```sql" {
            in_sql = true;
            sql.clear();
        } else if line.trim() == "```" && in_sql {
            in_sql = false;
            if let Some(n) = name.take() {
                out.push((n, sql.clone()));
            }
        } else if in_sql {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    out
}

/// The captured records of a case: (topic, key JSON, value JSON) with nulls for tombstones.
fn golden(case: &str) -> Vec<(String, Option<Json>, Option<Json>)> {
    let text = std::fs::read_to_string(golden_dir().join(format!("{case}.raw.jsonl"))).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let r: Json = serde_json::from_str(l).unwrap();
            let parse = |k: &str| {
                r[k].as_str()
                    .map(|s| serde_json::from_str::<Json>(s).unwrap())
            };
            (
                r["topic"].as_str().unwrap().to_owned(),
                parse("key"),
                parse("value"),
            )
        })
        .collect()
}

/// Blanks the values that differ between runs.
fn normalise(mut v: Json) -> Json {
    if let Some(p) = v.get_mut("payload").and_then(Json::as_object_mut) {
        for k in ["ts_ms", "ts_us", "ts_ns"] {
            if p.contains_key(k) {
                p.insert(k.into(), Json::Null);
            }
        }
        if let Some(src) = p.get_mut("source").and_then(Json::as_object_mut) {
            for k in [
                "version", "ts_ms", "ts_us", "ts_ns", "txId", "lsn", "sequence", "xmin", "db",
            ] {
                src.insert(k.into(), Json::Null);
            }
        }
    }
    v
}

fn routed(topic: &str) -> String {
    match topic.strip_prefix("cdc.public.") {
        Some(rest) => format!("warehouse.{rest}"),
        None => topic.to_owned(),
    }
}

struct Driver {
    task: PostgresSourceTask,
    conv: JsonConverter,
    committed: Option<(OffsetMap, OffsetMap)>,
    /// The task runs seen in the records' context headers.
    runs: headwater_tests::records::RunIds,
}

impl Driver {
    /// Polls until `n` records arrived (committing at transaction boundaries), then keeps
    /// polling for `settle` to catch unexpected extra records.
    async fn collect(&mut self, n: usize, settle: Duration) -> Vec<SourceRecord> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut settle_until: Option<Instant> = None;
        loop {
            let batch = self.task.poll().await.expect("poll");
            let closes = batch.boundary == Boundary::Commit;
            got.extend(batch.records);
            if closes {
                if let Some(last) = got.last() {
                    let c = (last.source_partition.clone(), last.source_offset.clone());
                    self.task
                        .commit(std::slice::from_ref(&c))
                        .await
                        .expect("commit");
                    self.committed = Some(c);
                }
            }
            if got.len() >= n && closes {
                let until = *settle_until.get_or_insert_with(|| Instant::now() + settle);
                if Instant::now() >= until {
                    return got;
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out with {} of {n} records",
                got.len()
            );
        }
    }

    fn json(&self, rec: &SourceRecord) -> (String, Option<Json>, Option<Json>) {
        let ser = |schema: Option<&headwater_api::SchemaRef>, v: &Value| {
            self.conv
                .from_connect_data(&rec.topic, schema, v)
                .unwrap()
                .map(|b| serde_json::from_slice::<Json>(&b).unwrap())
        };
        (
            routed(&rec.topic),
            ser(rec.key_schema.as_ref(), &rec.key),
            ser(rec.value_schema.as_ref(), &rec.value),
        )
    }

    fn compare(&mut self, case: &str, got: &[SourceRecord]) {
        let want = golden(case);
        self.runs.check(got, "cdc", "postgresql");
        assert_eq!(
            got.len(),
            want.len(),
            "{case}: record count; got topics {:?}",
            got.iter().map(|r| &r.topic).collect::<Vec<_>>()
        );
        for (i, (rec, (wt, wk, wv))) in got.iter().zip(&want).enumerate() {
            let (gt, gk, gv) = self.json(rec);
            assert_eq!(&gt, wt, "{case} #{i}: topic");
            assert_eq!(gk, *wk, "{case} #{i}: key");
            let gv = gv.map(normalise);
            let wv = wv.clone().map(normalise);
            if gv != wv {
                let g = serde_json::to_string_pretty(&gv).unwrap();
                let w = serde_json::to_string_pretty(&wv).unwrap();
                let first_diff = g.lines().zip(w.lines()).position(|(a, b)| a != b);
                panic!(
                    "{case} #{i}: value differs at line {first_diff:?}\n--- got ---\n{}\n--- want ---\n{}",
                    first_diff.map(|l| g.lines().skip(l.saturating_sub(5)).take(12).collect::<Vec<_>>().join("\n")).unwrap_or_default(),
                    first_diff.map(|l| w.lines().skip(l.saturating_sub(5)).take(12).collect::<Vec<_>>().join("\n")).unwrap_or_default(),
                );
            }
        }
    }
}

fn props(pg: &PostgresServer, extra: &[(&str, &str)]) -> Properties {
    let port = pg.port().to_string();
    let mut p: Properties = [
        ("connector.class", "io.debezium.connector.postgresql.PostgresConnector"),
        ("database.hostname", "127.0.0.1"),
        ("database.port", port.as_str()),
        ("database.user", "postgres"),
        ("database.password", "unused-with-trust"),
        ("database.dbname", "anchor_golden"),
        ("topic.prefix", "cdc"),
        ("table.include.list", "public.orders,public.customers,public.products,public.all_types,public.toast_test,public.anchor_ping"),
        ("slot.name", "debezium_slot"),
        ("plugin.name", "pgoutput"),
        ("publication.name", "dbz_publication"),
        ("snapshot.mode", "initial"),
        ("poll.interval.ms", "100"),
        ("status.update.interval.ms", "1000"),
        ("transforms", "route"),
        ("transforms.route.type", "org.apache.kafka.connect.transforms.RegexRouter"),
        ("transforms.route.regex", "cdc\\.public\\.(.*)"),
        ("transforms.route.replacement", "warehouse.$1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (k, v) in extra {
        p.insert((*k).to_owned(), (*v).to_owned());
    }
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_golden_case_is_reproduced() {
    let pg = PostgresServer::start().expect("start PostgreSQL");
    pg.create_database("anchor_golden").await.unwrap();
    let db = pg.connect("anchor_golden").await.unwrap();
    for f in ["pg_seed_schema.sql", "pg_golden_schema.sql"] {
        db.batch_execute(&std::fs::read_to_string(golden_dir().join(f)).unwrap())
            .await
            .unwrap();
    }
    let cases = case_sql();
    assert_eq!(
        cases.len(),
        20,
        "cases in README: {:?}",
        cases.iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    // Rows that exist before the connector starts (the two snapshot cases).
    for (name, sql) in &cases[..2] {
        assert!(name.starts_with("00_"));
        db.batch_execute(sql).await.unwrap();
    }
    let mut d = Driver {
        task: PostgresSourceTask::new(),
        conv: JsonConverter::new(JsonConverterConfig::default()),
        committed: None,
        runs: Default::default(),
    };
    d.task
        .start(SourceTaskContext::default(), props(&pg, &[]))
        .await
        .expect("start");
    let snap = d.collect(5, Duration::from_millis(300)).await;
    // Our snapshot follows table.include.list order: orders, customers, products, all_types.
    d.compare("00_snapshot_seed_tables", &snap[..3]);
    d.compare("00_snapshot_all_types", &snap[3..]);
    assert_eq!(
        snap[4].source_offset.get("snapshot_completed"),
        Some(&true.into())
    );

    for (name, sql) in &cases[2..] {
        if name.starts_with("18_") {
            // Run 2 of the capture: same slot, skipped.operations=none, resumed from offsets.
            d.task.stop().await;
            let ctx = SourceTaskContext {
                committed_offsets: d.committed.clone().into_iter().collect(),
                ..Default::default()
            };
            d.task = PostgresSourceTask::new();
            d.task
                .start(ctx, props(&pg, &[("skipped.operations", "none")]))
                .await
                .expect("restart");
        }
        db.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let n = golden(name).len();
        let got = d
            .collect(n, Duration::from_millis(if n == 0 { 1500 } else { 300 }))
            .await;
        d.compare(name, &got);
        if name.starts_with("04_") {
            // Primary-key change: headers as Debezium writes them.
            // Debezium's order: the key-change header, then its context headers.
            let before = |i: usize| {
                headwater_tests::records::context_headers(&got[i])
                    .expect("context headers")
                    .before
            };
            assert_eq!(before(0), ["__debezium.newkey"]);
            assert_eq!(before(1), ["__debezium.newkey"]);
            assert_eq!(before(2), ["__debezium.oldkey"]);
        }
    }
    // extended.headers.enabled (default on): one run id per task start.
    assert_eq!(d.runs.0.len(), 2, "{:?}", d.runs);
    // The slot's confirmed position followed the committed offsets.
    let row = db
        .query_one("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'debezium_slot'", &[])
        .await
        .unwrap();
    let confirmed: String = row.get(0);
    let committed = d.committed.as_ref().unwrap().1.get("lsn_proc").cloned();
    assert!(committed.is_some(), "streaming offsets carry lsn_proc");
    assert_ne!(confirmed, "0/0");
    d.task.stop().await;
}
