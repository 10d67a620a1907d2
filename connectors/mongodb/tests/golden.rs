//! Golden-file test: the captured Debezium 3.6.3 MongoDbConnector cases under
//! `tests/data/golden/debezium/mongodb/` (captured against SecantusDB 0.7.0b3) are reproduced
//! against a SecantusDB server started by the harness, running the very pymongo code of each
//! case (from the README, with its setup block) through the test virtualenv's Python. The task
//! is driven directly (poll, then commit the offsets of batches that end on a boundary), in
//! the capture's runs: A (00-26, default `capture.mode`, initial snapshot), B (30-43,
//! `change_streams`), D (50-54, update_full with pre-images, after enabling pre-images on
//! `shop.orders`), E (55, `change_streams_with_pre_image`), each resumed from the previous
//! run's committed offset. Records are serialised with the JSON converter and compared with
//! the captured JSON, ignoring only values that differ per run: timestamps, the version
//! string, `ord` of streamed events (the increment within the server's second, which depends
//! on how fast the cases run), `lsid` and `txnNumber`.
//! Run C (60-66) starts from fresh offsets after the collections were dropped and refilled
//! and passes every record through `ExtractNewDocumentState` (default options) before the
//! comparison; 66's mixed-type array fails the transform, as it fails Debezium's.
//! A second test reproduces the per-BSON-type probe `smt_types/`: one collection per value,
//! snapshotted, each record transformed with `array.encoding` array and document.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use headwater_api::plugin::{Boundary, SourceTask, SourceTaskContext};
use headwater_api::Transform;
use headwater_api::{OffsetMap, Properties, SourceRecord, Value};
use headwater_connector_mongodb::MongoSourceTask;
use headwater_format::{JsonConverter, JsonConverterConfig};
use headwater_tests::MongoServer;
use headwater_transforms::debezium::ExtractNewDocumentState;
use serde_json::Value as Json;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden/debezium/mongodb")
}

fn python() -> PathBuf {
    let venv = std::env::var_os("HEADWATER_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/headwater-test-venv"));
    venv.join("bin/python")
}

/// The README's setup block and each case's pymongo code (`## NN_case` then a ```python block).
fn readme_code() -> (String, Vec<(String, String)>) {
    let readme = std::fs::read_to_string(golden_dir().join("README.md")).unwrap();
    let mut setup = String::new();
    let mut cases = Vec::new();
    let mut name: Option<String> = None;
    let mut in_setup = false;
    let mut in_code = false;
    let mut code = String::new();
    for line in readme.lines() {
        if let Some(n) = line.strip_prefix("## ") {
            in_setup = n.starts_with("Documents and setup");
            name = n
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
                .then(|| n.trim().to_owned());
        } else if line.trim() == "```python" {
            in_code = true;
            code.clear();
        } else if line.trim() == "```" && in_code {
            in_code = false;
            if in_setup {
                setup.push_str(&code);
            } else if let Some(n) = name.take() {
                cases.push((n, code.clone()));
            }
        } else if in_code {
            code.push_str(line);
            code.push('\n');
        }
    }
    (setup, cases)
}

/// Runs pymongo `code` (after the imports and the README's setup) against the server.
fn run_python(server: &MongoServer, setup: &str, code: &str) {
    let script = format!(
        "import datetime, uuid, pymongo\n\
         from bson import ObjectId, Int64, Decimal128, Binary, Timestamp, Regex, MinKey, MaxKey, Code, DBRef\n\
         URI = {uri:?}\n\
         client = pymongo.MongoClient(URI, uuidRepresentation='standard')\n\
         orders = client.shop.orders\n\
         customers = client.shop.customers\n\
         SMT_UNSUPPORTED = ['array_mixed', 'minkey', 'maxkey', 'code_w_scope']\n\
         {setup}\n{code}\n",
        uri = server.uri()
    );
    let out = Command::new(python())
        .arg("-c")
        .arg(&script)
        .output()
        .expect("run the test virtualenv's python (scripts/install-deps)");
    assert!(
        out.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        code
    );
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
        if p.contains_key("ts_ms") {
            p.insert("ts_ms".into(), Json::Null);
        }
        if let Some(src) = p.get_mut("source").and_then(Json::as_object_mut) {
            for k in [
                "version",
                "ts_ms",
                "ts_us",
                "ts_ns",
                "wallTime",
                "lsid",
                "txnNumber",
            ] {
                if src.get(k).is_some_and(|v| !v.is_null()) {
                    src.insert(k.into(), Json::String("<per run>".into()));
                }
            }
            if src.get("ord").and_then(Json::as_i64).is_some_and(|o| o > 0) {
                src.insert("ord".into(), Json::String("<per run>".into()));
            }
        }
    }
    v
}

struct Driver {
    task: MongoSourceTask,
    conv: JsonConverter,
    committed: Option<(OffsetMap, OffsetMap)>,
    /// The task runs seen in the records' context headers.
    runs: headwater_tests::records::RunIds,
    /// Run C's transform, applied to every record as it is polled.
    smt: Option<ExtractNewDocumentState>,
    /// The transform's failures (records it refused), in order.
    smt_errors: Vec<String>,
}

impl Driver {
    fn new() -> Driver {
        Driver {
            task: MongoSourceTask::new(),
            conv: JsonConverter::new(JsonConverterConfig::default()),
            committed: None,
            runs: Default::default(),
            smt: None,
            smt_errors: Vec::new(),
        }
    }

    async fn start(&mut self, props: Properties) {
        let ctx = SourceTaskContext {
            committed_offsets: self.committed.clone().into_iter().collect(),
            ..Default::default()
        };
        self.task = MongoSourceTask::new();
        self.task.start(ctx, props).await.expect("start");
    }

    /// Polls until `n` records arrived (committing at boundaries), then keeps polling for
    /// `settle` to catch unexpected extra records.
    async fn collect(&mut self, n: usize, settle: Duration) -> Vec<SourceRecord> {
        let mut got: Vec<SourceRecord> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut settle_until: Option<Instant> = None;
        loop {
            let batch = self.task.poll().await.expect("poll");
            let closes = batch.boundary == Boundary::Commit;
            let last_offset = batch
                .records
                .iter()
                .rev()
                .find(|r| !r.source_offset.is_empty())
                .map(|r| (r.source_partition.clone(), r.source_offset.clone()));
            for r in batch
                .records
                .into_iter()
                .filter(|r| !r.topic.starts_with("__debezium-heartbeat"))
            {
                match &self.smt {
                    None => got.push(r),
                    Some(smt) => match smt.apply(r) {
                        Ok(Some(out)) => got.push(out),
                        Ok(None) => {}
                        Err(e) => self.smt_errors.push(e.to_string()),
                    },
                }
            }
            if closes {
                if let Some(c) = last_offset {
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
            rec.topic.clone(),
            ser(rec.key_schema.as_ref(), &rec.key),
            ser(rec.value_schema.as_ref(), &rec.value),
        )
    }

    fn compare(&mut self, case: &str, got: &[SourceRecord]) {
        let want = golden(case);
        self.runs.check(got, "cdc", "mongodb");
        assert_eq!(
            got.len(),
            want.len(),
            "{case}: record count; got {:?}",
            got.iter().map(|r| self.json(r)).collect::<Vec<_>>()
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

async fn start_server() -> MongoServer {
    tokio::task::spawn_blocking(MongoServer::start)
        .await
        .unwrap()
        .expect("SecantusDB (scripts/install-deps)")
}

fn props(server: &MongoServer, extra: &[(&str, &str)]) -> Properties {
    let uri = server.uri();
    let mut p: Properties = [
        (
            "connector.class",
            "io.debezium.connector.mongodb.MongoDbConnector",
        ),
        ("mongodb.connection.string", uri.as_str()),
        ("topic.prefix", "cdc"),
        ("collection.include.list", "shop.orders,shop.customers"),
        ("snapshot.mode", "initial"),
        ("poll.interval.ms", "100"),
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
    let server = start_server().await;
    let (setup, cases) = readme_code();
    let case = |prefix: &str| {
        cases
            .iter()
            .find(|(n, _)| n.starts_with(prefix))
            .unwrap_or_else(|| panic!("case {prefix} in the README"))
            .clone()
    };
    // The documents that exist before the connector starts.
    run_python(&server, &setup, &case("00_snapshot_orders").1);
    let mut d = Driver::new();
    d.start(props(&server, &[])).await;
    let snap = d.collect(9, Duration::from_millis(500)).await;
    // Collections in name order: customers, then orders; the very last record says "last".
    d.compare("00_snapshot_customers", &snap[..7]);
    d.compare("00_snapshot_orders", &snap[7..]);
    assert_eq!(
        snap[8].source_offset.get("snapshot_completed"),
        Some(&true.into())
    );

    let runs: [(&str, &[(&str, &str)]); 4] = [
        ("0", &[]),
        ("3", &[("capture.mode", "change_streams")]),
        (
            "5",
            &[("capture.mode", "change_streams_update_full_with_pre_image")],
        ),
        ("55", &[("capture.mode", "change_streams_with_pre_image")]),
    ];
    for (name, code) in cases
        .iter()
        .filter(|(n, _)| !n.starts_with("00_") && !n.starts_with('6'))
    {
        // A new run of the capture starts: resume from the committed offset with its config.
        let run = if name.starts_with("55_") {
            Some(runs[3])
        } else if name.starts_with("50_") {
            Some(runs[2])
        } else if name.starts_with("30_") {
            Some(runs[1])
        } else {
            None
        };
        if let Some((prefix, extra)) = run {
            d.task.stop().await;
            if prefix == "5" {
                run_python(
                    &server,
                    &setup,
                    "client.shop.command('collMod', 'orders', changeStreamPreAndPostImages={'enabled': True})",
                );
            }
            d.start(props(&server, extra)).await;
        }
        run_python(&server, &setup, code);
        let n = golden(name).len();
        let got = d
            .collect(n, Duration::from_millis(if n == 0 { 1500 } else { 400 }))
            .await;
        d.compare(name, &got);
    }
    // Committed offsets are Debezium's: sec, ord and the base64 resume token.
    let off = &d.committed.as_ref().unwrap().1;
    for k in ["sec", "ord", "resume_token"] {
        assert!(off.contains_key(k), "offset has {k}: {off:?}");
    }

    // Run C: ExtractNewDocumentState, fresh offsets after dropping and refilling.
    d.task.stop().await;
    run_python(&server, &setup, &case("60_").1);
    d.committed = None;
    d.smt = Some(ExtractNewDocumentState::configure(&Properties::new()).expect("SMT config"));
    d.start(props(&server, &[])).await;
    let snap = d.collect(4, Duration::from_millis(500)).await;
    d.compare("60_smt_snapshot", &snap);
    for (name, code) in cases
        .iter()
        .filter(|(n, _)| n.starts_with('6') && !n.starts_with("60_"))
    {
        run_python(&server, &setup, code);
        let n = golden(name).len();
        let got = d
            .collect(n, Duration::from_millis(if n == 0 { 1500 } else { 400 }))
            .await;
        d.compare(name, &got);
    }
    // extended.headers.enabled (default on): one run id per task start (A, B, 5, 55, C).
    assert_eq!(d.runs.0.len(), 5, "{:?}", d.runs);
    // 66: the mixed-type array is refused with a message naming the field.
    assert_eq!(d.smt_errors.len(), 1, "{:?}", d.smt_errors);
    let e = &d.smt_errors[0];
    assert!(
        e.contains("'arr'") && e.contains("different BSON types"),
        "{e}"
    );
    d.task.stop().await;
}

/// The per-type probe (`smt_types/`): each value alone in `{_id: 1, v: <value>}` in its own
/// collection of `smtprobe`, snapshotted and transformed; `<case>.raw.jsonl` is compared,
/// `<case>.error.txt` means the transform must refuse the record. `.array_document` cases use
/// `array.encoding=document`; there Debezium fails on the mixed array (a schema-building bug:
/// "field name duplication _0") where Headwater gives each element its own field, which is
/// what the option is documented to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extract_new_document_state_matches_the_type_probe() {
    let server = start_server().await;
    let (setup, _) = readme_code();
    let dir = golden_dir().join("smt_types");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let f = e.unwrap().file_name().into_string().unwrap();
            let stem = f
                .strip_suffix(".raw.jsonl")
                .or_else(|| f.strip_suffix(".error.txt"))?;
            Some(
                stem.strip_suffix(".array_document")
                    .unwrap_or(stem)
                    .to_owned(),
            )
        })
        .collect();
    names.sort();
    names.dedup();
    let code = format!(
        "import re\n\
         V = dict(all_types(OID1)); V.update(EDGE)\n\
         special = {{'fieldname_dotted': {{'_id': 1, 'a.b': 1}}, 'fieldname_dollar': {{'_id': 1, '$d': 1}},\n\
           'fieldname_space_unicode_digit': {{'_id': 1, 'with space': 1, '\\u00fcn\\u00ef': 2, '1digit': 3, 'a-b': 4}}}}\n\
         for n in {names:?}:\n\
         \x20   doc = special.get(n) or {{'_id': 1, 'v': V[n]}}\n\
         \x20   client.smtprobe['t_' + re.sub(r'[^A-Za-z0-9_]', '_', n)].insert_one(doc)\n"
    );
    run_python(&server, &setup, &code);

    let mut d = Driver::new();
    let mut p = props(&server, &[]);
    p.remove("collection.include.list");
    p.insert("database.include.list".into(), "smtprobe".into());
    d.start(p).await;
    let records = d.collect(names.len(), Duration::from_millis(500)).await;
    assert_eq!(records.len(), names.len());
    let by_array = ExtractNewDocumentState::configure(&Properties::new()).unwrap();
    let by_document = ExtractNewDocumentState::configure(
        &[("array.encoding".to_owned(), "document".to_owned())]
            .into_iter()
            .collect(),
    )
    .unwrap();
    let mut compared = 0;
    for rec in &records {
        let collection = rec
            .topic
            .strip_prefix("cdc.smtprobe.t_")
            .unwrap()
            .to_owned();
        let name = names
            .iter()
            .find(|n| {
                n.replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_") == collection
            })
            .unwrap_or_else(|| panic!("probe for {}", rec.topic))
            .clone();
        for (suffix, smt) in [("", &by_array), (".array_document", &by_document)] {
            let case = format!("{name}{suffix}");
            let raw = dir.join(format!("{case}.raw.jsonl"));
            let error = dir.join(format!("{case}.error.txt"));
            let out = smt.apply(rec.clone());
            if raw.exists() {
                let out = out
                    .unwrap_or_else(|e| panic!("{case}: {e}"))
                    .expect("a record");
                d.compare(&format!("smt_types/{case}"), std::slice::from_ref(&out));
                compared += 1;
            } else if error.exists() {
                if case == "array_mixed.array_document" {
                    let out = out.unwrap().expect("a record");
                    let v = d.json(&out).2.unwrap();
                    let fields = v["payload"]["v"].as_object().unwrap();
                    assert_eq!(fields.len(), 6, "{v}");
                    assert_eq!(v["payload"]["v"]["_1"], Json::from("two"));
                } else {
                    let e = out.err().unwrap_or_else(|| panic!("{case} must fail"));
                    assert!(e.to_string().contains("'v'"), "{case}: {e}");
                }
                compared += 1;
            }
        }
    }
    assert!(compared >= 60, "{compared} probe cases checked");
    d.task.stop().await;
}
