//! Debezium's source signals against a real MariaDB: an `execute-snapshot` row inserted into
//! `signal.data.collection` reads the tables it names (through its condition) in a newer
//! consistent snapshot, then streaming goes on after the signal, every row once, across a
//! restart before the read starts and one in the middle of it. A signal whose condition the
//! server refuses is logged and streaming goes on; a missing signal table is refused at start.
//! An incremental request reads tables in chunks between watermark rows while writers change
//! them, across a restart; the events replayed in order give the table's content, also when a
//! change commits while its chunk is being read; stop-snapshot ends it. `snapshot.mode`'s
//! decisions at start (initial_only, configuration_based) and `INSERT_DELETE` watermarks are
//! checked here too, and so are the notifications both kinds of snapshot send to
//! `notification.sink.topic.name`.

use std::time::{Duration, Instant};

use headwater_api::plugin::{Boundary, SourceTask, SourceTaskContext};
use headwater_api::{OffsetMap, OffsetValue, Properties, SourceRecord, Value};
use headwater_connector_mysql::MySqlSourceTask;
use headwater_tests::records::notifications;
use headwater_tests::MariaDbServer;
use mysql_async::prelude::Queryable;

fn props(server: &MariaDbServer, extra: &[(&str, &str)]) -> Properties {
    let mut p: Properties = [
        ("connector.class", "mariadb"),
        ("database.hostname", "127.0.0.1"),
        ("database.port", &server.port().to_string()),
        ("database.user", "root"),
        ("database.server.id", "7101"),
        ("topic.prefix", "cdc"),
        ("table.include.list", "app.captured,app.other"),
        ("include.schema.changes", "false"),
        ("poll.interval.ms", "100"),
        ("signal.data.collection", "app.debezium_signal"),
        ("max.batch.size", "4"),
        ("snapshot.max.threads", "1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (k, v) in extra {
        p.insert((*k).to_owned(), (*v).to_owned());
    }
    p
}

type Committed = Vec<(OffsetMap, OffsetMap)>;

async fn start(p: Properties, committed: Committed) -> MySqlSourceTask {
    let mut t = MySqlSourceTask::new();
    let ctx = SourceTaskContext {
        committed_offsets: committed,
        ..Default::default()
    };
    t.start(ctx, p).await.unwrap();
    t
}

/// Polls until `n` records arrived, committing at transaction boundaries like the engine.
async fn drain(task: &mut MySqlSourceTask, n: usize) -> Vec<SourceRecord> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        let batch = task.poll().await.expect("poll");
        got.extend(batch.records);
        if batch.boundary == Boundary::Commit {
            // The engine commits the newest offset a record carries (notifications carry none).
            if let Some(last) = got.iter().rev().find(|r| !r.source_offset.is_empty()) {
                let c = (last.source_partition.clone(), last.source_offset.clone());
                task.commit(std::slice::from_ref(&c)).await.unwrap();
            }
        }
        assert!(Instant::now() < deadline, "{} of {n} records", got.len());
    }
    got
}

/// Polls (without committing) until a batch holds a record `pick` accepts; returns it.
async fn poll_until(
    task: &mut MySqlSourceTask,
    pick: impl Fn(&SourceRecord) -> bool,
) -> Vec<SourceRecord> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let b = task.poll().await.unwrap();
        if b.records.iter().any(&pick) {
            return b.records;
        }
        assert!(Instant::now() < deadline, "no such record arrived");
    }
}

fn op_of(r: &SourceRecord) -> Option<String> {
    Some(r.value.as_struct()?.get("op")?.as_str()?.to_owned())
}

fn ids(recs: &[SourceRecord], op: &str) -> Vec<i32> {
    recs.iter()
        .filter(|r| r.topic == "cdc.app.captured" && op_of(r).as_deref() == Some(op))
        .filter_map(
            |r| match r.value.as_struct()?.get("after")?.as_struct()?.get("id")? {
                Value::Int32(i) => Some(*i),
                _ => None,
            },
        )
        .collect()
}

fn offset_text(r: &SourceRecord, key: &str) -> Option<String> {
    match r.source_offset.get(key)? {
        OffsetValue::String(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

fn committed_at(r: &SourceRecord) -> Committed {
    vec![(r.source_partition.clone(), r.source_offset.clone())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_snapshot_signal_reads_named_tables_once_across_restarts() {
    let server = MariaDbServer::start().unwrap();
    server.create_database("app").await.unwrap();
    let mut db = server.connect("app").await.unwrap();
    let rows: Vec<String> = (1..=20)
        .map(|i| format!("({i}, '{}')", if i % 2 == 0 { "open" } else { "closed" }))
        .collect();
    db.query_drop(format!(
        "CREATE TABLE captured (id int PRIMARY KEY, status varchar(16) NOT NULL);
         INSERT INTO captured VALUES {};
         CREATE TABLE other (id int PRIMARY KEY); INSERT INTO other VALUES (1), (2), (3), (4), (5);
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));
         INSERT INTO debezium_signal VALUES ('before', 'log', '{{\"message\": \"not snapshotted\"}}');",
        rows.join(", ")
    ))
    .await
    .unwrap();
    let p = props(&server, &[]);
    let mut t1 = start(p.clone(), Vec::new()).await;
    let initial = drain(&mut t1, 25).await;
    assert_eq!(
        initial
            .iter()
            .filter(|r| op_of(r).as_deref() == Some("r"))
            .count(),
        25
    );
    assert!(
        initial
            .iter()
            .all(|r| !r.topic.ends_with("debezium_signal")),
        "the signal table is not snapshotted"
    );

    // A condition the server refuses: logged, not acted on; streaming goes on.
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('bad', 'execute-snapshot', '{"data-collections": ["app\\\\.captured"], "type": "blocking", "additional-conditions": [{"data-collection": "app.captured", "filter": "no_such_column = 1"}]}');
           INSERT INTO debezium_signal VALUES ('sneaky', 'execute-snapshot', '{"data-collections": ["app\\\\.captured"], "additional-conditions": [{"data-collection": "app.captured", "filter": "true); DELETE FROM captured; SELECT (1"}]}');
           INSERT INTO captured VALUES (100, 'closed');"#,
    )
    .await
    .unwrap();
    let mut after_bad = Vec::new();
    while !ids(&after_bad, "c").contains(&100) {
        after_bad.extend(drain(&mut t1, 1).await);
    }
    assert!(ids(&after_bad, "r").is_empty(), "{after_bad:?}");
    assert!(
        after_bad
            .iter()
            .any(|r| r.topic == "cdc.app.debezium_signal" && op_of(r).as_deref() == Some("c")),
        "the signal row itself is streamed, as in Debezium"
    );
    assert!(
        after_bad
            .iter()
            .filter_map(|r| offset_text(r, "snapshot_signal"))
            .any(|s| s.contains("no_such_column")),
        "the bad signal was read as a request (and then refused)"
    );
    let rows: Option<i64> = db
        .query_first("SELECT count(*) FROM captured")
        .await
        .unwrap();
    assert_eq!(
        rows,
        Some(21),
        "a condition holding a second statement is refused, not run"
    );

    // The signal: all of `captured`. Its transaction's record carries the request, and that
    // is all that is committed before the task stops.
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('resnap', 'execute-snapshot', '{"data-collections": ["app\\\\.capt.*"], "type": "blocking"}');"#,
    )
    .await
    .unwrap();
    let batch = poll_until(&mut t1, |r| r.topic == "cdc.app.debezium_signal").await;
    let last = batch.last().unwrap();
    assert!(offset_text(last, "snapshot_signal").is_some_and(|s| s.contains("capt")));
    let committed = committed_at(last);
    t1.stop().await;

    // Changes before the read starts: in the read, never streamed as well.
    for i in 21..=25 {
        db.exec_drop("INSERT INTO captured VALUES (?, 'open')", (i,))
            .await
            .unwrap();
    }
    let mut t2 = start(p.clone(), committed).await;
    let first = poll_until(&mut t2, |r| op_of(r).as_deref() == Some("r")).await;
    let mut read = ids(&first, "r");
    assert_eq!(read, vec![1, 2, 3, 4], "key order");
    let last = first.last().unwrap();
    assert_eq!(offset_text(last, "snapshot").as_deref(), Some("BLOCKING"));
    assert!(offset_text(last, "snapshot_signal").is_some());
    let committed = committed_at(last);
    t2.stop().await;

    // A crash in the read: it resumes after its last committed row, then streams on after the
    // signal; rows written meanwhile come out once.
    for i in 26..=28 {
        db.exec_drop("INSERT INTO captured VALUES (?, 'open')", (i,))
            .await
            .unwrap();
    }
    let mut t3 = start(p.clone(), committed).await;
    let writer = {
        let mut conn = server.connect("app").await.unwrap();
        tokio::spawn(async move {
            for i in 29..=35 {
                conn.exec_drop("INSERT INTO captured VALUES (?, 'open')", (i,))
                    .await
                    .unwrap();
            }
        })
    };
    let mut rest = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        rest.extend(drain(&mut t3, 1).await);
        let mut seen = ids(&rest, "r");
        seen.extend(ids(&rest, "c"));
        if writer.is_finished() && seen.contains(&35) {
            break;
        }
        assert!(Instant::now() < deadline, "have {seen:?}");
    }
    writer.await.unwrap();
    read.extend(ids(&rest, "r"));
    let mut seen = read.clone();
    seen.extend(ids(&rest, "c"));
    seen.sort_unstable();
    let expected: Vec<i32> = (1..=35).chain([100]).collect();
    assert_eq!(seen, expected, "every row once, as read or streamed");
    assert!(
        rest.iter()
            .chain(&first)
            .all(|r| r.topic != "cdc.app.other"),
        "tables the signal does not name are not read"
    );
    assert!(
        ids(&rest, "r").iter().all(|i| *i > 4),
        "the resumed read starts after its last committed row"
    );

    // A signal while the task runs, through a condition: the read holds only the matching
    // rows, and the stream goes on in the same task after it.
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('other', 'execute-snapshot', '{"data-collections": ["app\\\\.other"], "type": "blocking", "additional-conditions": [{"data-collection": "app.other", "filter": "id > 3"}]}');
           INSERT INTO captured VALUES (200, 'open');"#,
    )
    .await
    .unwrap();
    let mut later = Vec::new();
    while !ids(&later, "c").contains(&200) {
        later.extend(drain(&mut t3, 1).await);
    }
    let other_rows: Vec<i32> = later
        .iter()
        .filter(|r| r.topic == "cdc.app.other" && op_of(r).as_deref() == Some("r"))
        .filter_map(
            |r| match r.value.as_struct()?.get("after")?.as_struct()?.get("id")? {
                Value::Int32(i) => Some(*i),
                _ => None,
            },
        )
        .collect();
    assert_eq!(
        other_rows,
        vec![4, 5],
        "only the rows the condition selects"
    );
    let copy_at = later.iter().position(|r| r.topic == "cdc.app.other");
    let change_at = later
        .iter()
        .position(|r| ids(std::slice::from_ref(r), "c") == [200]);
    assert!(
        copy_at < change_at,
        "the read comes before the changes after the signal"
    );
    t3.stop().await;

    // A signal table that does not exist is refused at start.
    let mut t4 = MySqlSourceTask::new();
    let err = t4
        .start(
            SourceTaskContext::default(),
            props(&server, &[("signal.data.collection", "app.missing_signal")]),
        )
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_select_statement_overrides_filter_the_initial_snapshot() {
    let server = MariaDbServer::start().unwrap();
    server.create_database("app").await.unwrap();
    let mut db = server.connect("app").await.unwrap();
    let rows: Vec<String> = (1..=10).map(|i| format!("({i}, 'open')")).collect();
    db.query_drop(format!(
        "CREATE TABLE captured (id int PRIMARY KEY, status varchar(16) NOT NULL);
         INSERT INTO captured VALUES {};
         CREATE TABLE other (id int PRIMARY KEY); INSERT INTO other VALUES (1), (2), (3);
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));",
        rows.join(", ")
    ))
    .await
    .unwrap();
    let p = props(
        &server,
        &[
            ("snapshot.chunk.rows", "2"),
            ("snapshot.select.statement.overrides", "app.captured"),
            (
                "snapshot.select.statement.overrides.app.captured",
                "SELECT status, id FROM app.captured WHERE id % 2 = 0 -- columns by name",
            ),
        ],
    );
    let mut task = start(p, Vec::new()).await;
    let snap = drain(&mut task, 8).await;
    assert_eq!(
        ids(&snap, "r"),
        vec![2, 4, 6, 8, 10],
        "the override's rows, in key order"
    );
    assert_eq!(
        snap.iter().filter(|r| r.topic == "cdc.app.other").count(),
        3,
        "other tables are read whole"
    );
    task.stop().await;
}

/// Inserts a marker row into `inc` and polls (committing as the engine does) until its event
/// arrived: every change before it is then in `seen`.
async fn catch_up(
    task: &mut MySqlSourceTask,
    db: &mut mysql_async::Conn,
    marker: &str,
    committed: &mut Committed,
    seen: &mut Vec<SourceRecord>,
) {
    db.query_drop(format!("INSERT INTO inc VALUES (9, '{marker}', 0)"))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let b = task.poll().await.unwrap();
        if b.boundary == Boundary::Commit {
            if let Some(l) = b.records.last() {
                *committed = committed_at(l);
                task.commit(committed).await.unwrap();
            }
        }
        let arrived = b
            .records
            .iter()
            .any(|r| field(r, "after", "name").as_deref() == Some(marker));
        seen.extend(b.records);
        if arrived {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the marker {marker} did not arrive"
        );
    }
}

/// The table's content, keyed like [`materialise`]'s.
async fn table(db: &mut mysql_async::Conn) -> std::collections::BTreeMap<(i32, String), i32> {
    let rows: Vec<(i32, String, i32)> = db.query("SELECT grp, name, val FROM inc").await.unwrap();
    rows.into_iter().map(|(g, n, v)| ((g, n), v)).collect()
}

/// A record's `after` (or, for deletes, `before`) row field as text.
fn field(r: &SourceRecord, image: &str, name: &str) -> Option<String> {
    match r.value.as_struct()?.get(image)?.as_struct()?.get(name)? {
        Value::Int32(i) => Some(i.to_string()),
        Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Applies change events in order to a map from key to value, as a consumer materialises a
/// topic.
fn materialise(recs: &[SourceRecord]) -> std::collections::BTreeMap<(i32, String), i32> {
    let mut state = std::collections::BTreeMap::new();
    for r in recs.iter().filter(|r| r.topic == "cdc.app.inc") {
        let image = |img: &str| {
            Some((
                (field(r, img, "grp")?.parse().ok()?, field(r, img, "name")?),
                field(r, img, "val")?.parse().ok()?,
            ))
        };
        match op_of(r).as_deref() {
            Some("d") => {
                let (k, _) = image("before").expect("a before image");
                state.remove(&k);
            }
            Some(_) => {
                let (k, v) = image("after").expect("an after image");
                state.insert(k, v);
            }
            None => {}
        }
    }
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_snapshot_reads_chunks_while_writers_change_the_table() {
    let server = MariaDbServer::start().unwrap();
    server.create_database("app").await.unwrap();
    let mut db = server.connect("app").await.unwrap();
    let rows: Vec<String> = (1..=60)
        .map(|i| format!("({}, 'n{i}', {i})", i % 3))
        .collect();
    db.query_drop(format!(
        "CREATE TABLE inc (grp int, name varchar(32), val int NOT NULL, PRIMARY KEY (grp, name));
         INSERT INTO inc VALUES {};
         CREATE TABLE nokey (id int); INSERT INTO nokey VALUES (1);
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));",
        rows.join(", ")
    ))
    .await
    .unwrap();
    let p = props(
        &server,
        &[
            ("table.include.list", "app.inc,app.nokey"),
            ("snapshot.mode", "no_data"),
            ("incremental.snapshot.chunk.size", "7"),
            ("max.batch.size", "16"),
        ],
    );
    async fn step(task: &mut MySqlSourceTask, committed: &mut Committed) -> Vec<SourceRecord> {
        step_to(task, committed).await.0
    }
    /// One poll: its records and whether the batch ended at a commit boundary (a batch may
    /// end inside a transaction, its last record without an offset).
    async fn step_to(
        task: &mut MySqlSourceTask,
        committed: &mut Committed,
    ) -> (Vec<SourceRecord>, bool) {
        let b = task.poll().await.unwrap();
        let at_commit = b.boundary == Boundary::Commit;
        if at_commit {
            if let Some(l) = b.records.last() {
                *committed = committed_at(l);
                task.commit(committed).await.unwrap();
            }
        }
        (b.records, at_commit)
    }
    let is_r = |r: &SourceRecord| op_of(r).as_deref() == Some("r");
    let mut committed = Vec::new();
    let mut t1 = start(p.clone(), Vec::new()).await;
    let _ = step(&mut t1, &mut committed).await;
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('inc-1', 'execute-snapshot', '{"data-collections": ["app\\\\.inc", "app\\\\.nokey"]}')"#,
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Until the first chunk is out and a batch ended at a commit boundary after it (the chunk
    // goes out at its close watermark's row event; the transaction's end may come in the
    // next batch).
    let mut at_commit = false;
    while !(at_commit && seen.iter().any(is_r)) {
        let (got, commit) = step_to(&mut t1, &mut committed).await;
        seen.extend(got);
        at_commit = commit;
        assert!(
            Instant::now() < deadline,
            "no chunk arrived: {:?}",
            seen.iter()
                .map(|r| format!("{} {:?} {:?}", r.topic, op_of(r), field(r, "after", "type")))
                .collect::<Vec<_>>()
        );
    }
    let first: Vec<&SourceRecord> = seen.iter().filter(|r| is_r(r)).collect();
    assert_eq!(
        first.len(),
        7,
        "one chunk of incremental.snapshot.chunk.size rows"
    );
    for r in &first {
        let source = r
            .value
            .as_struct()
            .unwrap()
            .get("source")
            .unwrap()
            .as_struct()
            .unwrap();
        assert_eq!(
            source.get("snapshot").and_then(|v| v.as_str()),
            Some("incremental")
        );
    }
    assert!(offset_text(seen.last().unwrap(), "incremental_snapshot").is_some());
    t1.stop().await;

    // Writers change the table while the read goes on in a restarted task.
    let mut t2 = start(p.clone(), committed.clone()).await;
    let writer = {
        let mut conn = server.connect("app").await.unwrap();
        tokio::spawn(async move {
            for i in 1..=60 {
                let statement = match i % 4 {
                    0 => format!("DELETE FROM inc WHERE name = 'n{i}'"),
                    1 => format!("UPDATE inc SET val = val + 1000 WHERE name = 'n{i}'"),
                    2 => format!("UPDATE inc SET grp = grp + 10 WHERE name = 'n{i}'"),
                    _ => format!("INSERT INTO inc VALUES (5, 'n{i}', 7)"),
                };
                conn.query_drop(statement).await.unwrap();
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    let mut tick = 0;
    let mut last_tick = Instant::now();
    // Polls until `done` finished and an offset after it no longer carries the progress.
    macro_rules! until_finished {
        ($done:expr, $what:expr) => {{
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let got = step(&mut t2, &mut committed).await;
                let finished = $done.is_finished()
                    && got.last().is_some_and(|r| {
                        r.source_offset.contains_key("file")
                            && !r.source_offset.contains_key("incremental_snapshot")
                    });
                seen.extend(got);
                if finished {
                    break;
                }
                if $done.is_finished() && last_tick.elapsed() > Duration::from_millis(200) {
                    tick += 1;
                    db.query_drop(format!("INSERT INTO inc VALUES (9, 'tick{tick}', 0)"))
                        .await
                        .unwrap();
                    last_tick = Instant::now();
                }
                assert!(Instant::now() < deadline, "{} did not end", $what);
            }
        }};
    }
    until_finished!(writer, "the incremental snapshot");
    writer.await.unwrap();
    catch_up(&mut t2, &mut db, "caught-up-1", &mut committed, &mut seen).await;
    assert_eq!(
        materialise(&seen),
        table(&mut db).await,
        "the events in order give the table"
    );
    assert!(
        seen.iter().all(|r| r.topic != "cdc.app.nokey"),
        "a table without a key is not read"
    );

    // A second request, stopped: no chunk after the stop.
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('inc-2', 'execute-snapshot', '{"data-collections": ["app\\\\.inc"], "type": "incremental"}')"#,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut again = Vec::new();
    while !again.iter().any(is_r) {
        again.extend(step(&mut t2, &mut committed).await);
        assert!(Instant::now() < deadline, "the second request read nothing");
    }
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('stop-1', 'stop-snapshot', '{"data-collections": ["app\\\\.inc"], "type": "incremental"}');
           INSERT INTO inc VALUES (9, 'after-stop', 0);"#,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        again.extend(step(&mut t2, &mut committed).await);
        if let Some(at) = again
            .iter()
            .position(|r| field(r, "after", "name").as_deref() == Some("after-stop"))
        {
            let stop = again
                .iter()
                .position(|r| field(r, "after", "id").as_deref() == Some("stop-1"))
                .expect("the stop signal row");
            assert!(
                again[stop..].iter().all(|r| !is_r(r)),
                "no chunk after the stop"
            );
            assert!(!again[at].source_offset.contains_key("incremental_snapshot"));
            break;
        }
        assert!(Instant::now() < deadline, "the marker did not arrive");
    }
    seen.extend(again);

    // A change that commits while its chunk is being read, after the read began: the chunk
    // holds the row as it was, the stream the change inside the window, and the stale row
    // must not follow the change. The condition sleeps at the first row, after it was read.
    let (first_grp, first_name): (i32, String) = db
        .query_first("SELECT grp, name FROM inc WHERE grp = 0 ORDER BY grp, name LIMIT 1")
        .await
        .unwrap()
        .unwrap();
    db.query_drop(format!(
        r#"INSERT INTO debezium_signal VALUES ('inc-3', 'execute-snapshot', '{{"data-collections": ["app\\\\.inc"], "additional-conditions": [{{"data-collection": "app.inc", "filter": "grp = 0 AND (name <> \'{first_name}\' OR SLEEP(0.5) = 0)"}}]}}')"#
    ))
    .await
    .unwrap();
    let racer = {
        let mut conn = server.connect("app").await.unwrap();
        let name = first_name.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let sleeping: Option<i64> = conn
                    .query_first(
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%ORDER BY%LIMIT 7' AND STATE = 'User sleep'",
                    )
                    .await
                    .unwrap();
                if sleeping.unwrap_or(0) > 0 {
                    break;
                }
                assert!(Instant::now() < deadline, "no chunk read started");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            conn.exec_drop(
                "UPDATE inc SET val = 424242 WHERE grp = ? AND name = ?",
                (first_grp, name),
            )
            .await
            .unwrap();
        })
    };
    until_finished!(racer, "the third incremental snapshot");
    racer.await.unwrap();
    catch_up(&mut t2, &mut db, "caught-up-2", &mut committed, &mut seen).await;
    let state = materialise(&seen);
    assert_eq!(
        state.get(&(first_grp, first_name.clone())),
        Some(&424242),
        "the change made while its chunk was read is the row's last event"
    );
    assert_eq!(
        state,
        table(&mut db).await,
        "the events in order give the table"
    );
    t2.stop().await;
}

/// Polls into `seen` until rows 1..=`n` of `app.captured` arrived as `r` events, and checks
/// each came once.
async fn read_every_row_once(t: &mut MySqlSourceTask, seen: &mut Vec<SourceRecord>, n: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while ids(seen, "r").len() < n as usize {
        seen.extend(drain(t, 1).await);
        assert!(
            Instant::now() < deadline,
            "the incremental snapshot did not copy the table: {:?}",
            ids(seen, "r")
        );
    }
    let mut read = ids(seen, "r");
    read.sort_unstable();
    assert_eq!(read, (1..=n).collect::<Vec<_>>(), "every row once");
}

/// A server whose `app.captured` holds rows 1..=`n` (status `open`), with a signal table.
async fn server_with_captured_rows(n: i32) -> (MariaDbServer, mysql_async::Conn) {
    let server = MariaDbServer::start().unwrap();
    server.create_database("app").await.unwrap();
    let mut db = server.connect("app").await.unwrap();
    let rows: Vec<String> = (1..=n).map(|i| format!("({i}, 'open')")).collect();
    db.query_drop(format!(
        "CREATE TABLE captured (id int PRIMARY KEY, status varchar(16) NOT NULL);
         INSERT INTO captured VALUES {};
         CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));",
        rows.join(", ")
    ))
    .await
    .unwrap();
    (server, db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signalled_read_the_server_refuses_part_way_is_given_up_and_streaming_goes_on() {
    let (server, mut db) = server_with_captured_rows(20).await;
    let mut t = start(props(&server, &[("snapshot.mode", "no_data")]), Vec::new()).await;
    let _ = drain(&mut t, 0).await;
    // The trial (LIMIT 1) meets only id 1, where `id < 3` decides; from id 3 on the subquery
    // returns several rows, which the server refuses (SQLSTATE 21000) in the middle of the read.
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('fails-later', 'execute-snapshot', '{"data-collections": ["app\\\\.captured"], "type": "blocking", "additional-conditions": [{"data-collection": "app.captured", "filter": "id < 3 OR (SELECT 1 FROM app.captured c2 WHERE c2.id <= captured.id) = 1"}]}');
           INSERT INTO captured VALUES (100, 'after');"#,
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ids(&got, "c").contains(&100) {
        got.extend(drain(&mut t, 1).await);
        assert!(
            Instant::now() < deadline,
            "the insert after the signal did not arrive"
        );
    }
    assert!(
        ids(&got, "r").iter().all(|i| *i < 3),
        "only rows before the refused one were read: {:?}",
        ids(&got, "r")
    );
    t.stop().await;
}

/// `signal.enabled.channels=file`: a JSON line in `signal.file` runs an incremental snapshot
/// (its watermarks still go into the signal table), a row inserted into the signal table is
/// no signal, and the file is taken once read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_channel_signals_run_an_incremental_snapshot() {
    let (server, mut db) = server_with_captured_rows(10).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("signals.txt");
    let file_text = file.display().to_string();
    let p = props(
        &server,
        &[
            ("snapshot.mode", "no_data"),
            ("signal.enabled.channels", "file"),
            ("signal.file", &file_text),
            ("signal.poll.interval.ms", "100"),
            ("incremental.snapshot.chunk.size", "4"),
        ],
    );
    let mut t = start(p, Vec::new()).await;
    let mut seen = drain(&mut t, 0).await;
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('row-1', 'execute-snapshot', '{"data-collections": ["app\\\\.captured"], "type": "blocking"}');
           INSERT INTO captured VALUES (11, 'after');"#,
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ids(&seen, "c").contains(&11) {
        seen.extend(drain(&mut t, 1).await);
        assert!(Instant::now() < deadline, "the insert did not arrive");
    }
    let until = Instant::now() + Duration::from_millis(800);
    while Instant::now() < until {
        seen.extend(t.poll().await.unwrap().records);
    }
    assert!(ids(&seen, "r").is_empty(), "the signal row ran nothing");

    std::fs::write(
        &file,
        "{\"id\": \"f-1\", \"type\": \"execute-snapshot\", \"data\": {\"data-collections\": [\"app\\\\.captured\"]}}\n",
    )
    .unwrap();
    read_every_row_once(&mut t, &mut seen, 11).await;
    assert!(!file.exists(), "the file was taken");
    t.stop().await;
}

/// `incremental.snapshot.watermarking.strategy=INSERT_DELETE`: each chunk's window closes by
/// deleting its open watermark row; every row is copied once and the signal table keeps
/// only the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_delete_watermarks_leave_the_signal_table_empty() {
    let (server, mut db) = server_with_captured_rows(10).await;
    let p = props(
        &server,
        &[
            ("snapshot.mode", "no_data"),
            ("incremental.snapshot.chunk.size", "4"),
            (
                "incremental.snapshot.watermarking.strategy",
                "INSERT_DELETE",
            ),
        ],
    );
    let mut t = start(p, Vec::new()).await;
    let mut seen = drain(&mut t, 0).await;
    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('sig-1', 'execute-snapshot', '{"data-collections": ["app\\\\.captured"], "type": "incremental"}');"#,
    )
    .await
    .unwrap();
    read_every_row_once(&mut t, &mut seen, 10).await;
    // The last (empty) chunk's open row is deleted once the copy has ended.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<String> = db
            .query("SELECT id FROM debezium_signal ORDER BY id")
            .await
            .unwrap();
        if left == ["sig-1"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "watermarks left behind: {left:?}"
        );
        seen.extend(t.poll().await.unwrap().records);
    }
    assert_eq!(ids(&seen, "r").len(), 10, "nothing read twice");
    t.stop().await;
}

/// Polls a few times, asserting nothing comes (a task that does not stream).
async fn quiet(t: &mut MySqlSourceTask) {
    for _ in 0..5 {
        let b = t.poll().await.unwrap();
        assert!(
            b.records.is_empty(),
            "{} records from a task that does not stream",
            b.records.len()
        );
    }
}

/// `snapshot.mode` decides at start: `initial_only` never streams, also after a restart with
/// its completed offset; `configuration_based` with `snapshot.data` alone snapshots at every
/// start and never streams; with `start.stream`, a purged binlog position fails the task
/// unless `snapshot.on.data.error` says to stream on from the server's current position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_modes_decide_what_a_start_does() {
    let (server, mut db) = server_with_captured_rows(5).await;
    let mut t1 = start(
        props(&server, &[("snapshot.mode", "initial_only")]),
        Vec::new(),
    )
    .await;
    let snap1 = drain(&mut t1, 5).await;
    assert_eq!(ids(&snap1, "r"), vec![1, 2, 3, 4, 5]);
    db.query_drop("INSERT INTO captured VALUES (6, 'open')")
        .await
        .unwrap();
    quiet(&mut t1).await;
    let committed = committed_at(snap1.last().unwrap());
    t1.stop().await;
    let mut t2 = start(
        props(&server, &[("snapshot.mode", "initial_only")]),
        committed.clone(),
    )
    .await;
    quiet(&mut t2).await;
    t2.stop().await;
    let cb = |keys: &[(&str, &str)]| {
        let mut extra = vec![("snapshot.mode", "configuration_based")];
        extra.extend_from_slice(keys);
        props(&server, &extra)
    };
    let mut t3 = start(
        cb(&[("snapshot.mode.configuration.based.snapshot.data", "true")]),
        committed.clone(),
    )
    .await;
    let snap3 = drain(&mut t3, 6).await;
    assert_eq!(ids(&snap3, "r"), vec![1, 2, 3, 4, 5, 6]);
    quiet(&mut t3).await;
    t3.stop().await;
    // The committed position's binlog file is purged (MariaDB keeps a file until its binlog
    // checkpoint has moved on, which happens in the background after the rotation).
    let committed_file = match &committed[0].1["file"] {
        OffsetValue::String(f) => f.clone(),
        other => panic!("file is {other:?}"),
    };
    db.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let current: String = db
            .query_first("SHOW MASTER STATUS")
            .await
            .unwrap()
            .map(|row: mysql_async::Row| row.get(0).unwrap())
            .unwrap();
        db.query_drop(format!("PURGE BINARY LOGS TO '{current}'"))
            .await
            .unwrap();
        let logs: Vec<String> = db
            .query_map("SHOW BINARY LOGS", |row: mysql_async::Row| {
                row.get::<String, _>(0).unwrap()
            })
            .await
            .unwrap();
        if !logs.contains(&committed_file) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{committed_file} is not purged: {logs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut t4 = MySqlSourceTask::new();
    let err = t4
        .start(
            SourceTaskContext {
                committed_offsets: committed.clone(),
                ..Default::default()
            },
            cb(&[("snapshot.mode.configuration.based.start.stream", "true")]),
        )
        .await
        .expect_err("a purged position fails the task");
    assert!(err.message().contains("no longer available"), "{err}");
    let mut t5 = start(
        cb(&[
            ("snapshot.mode.configuration.based.start.stream", "true"),
            (
                "snapshot.mode.configuration.based.snapshot.on.data.error",
                "true",
            ),
        ]),
        committed,
    )
    .await;
    db.query_drop("INSERT INTO captured VALUES (7, 'open')")
        .await
        .unwrap();
    let streamed = poll_until(&mut t5, |r| op_of(r).as_deref() == Some("c")).await;
    assert_eq!(ids(&streamed, "c"), vec![7]);
    assert!(ids(&streamed, "r").is_empty());
    t5.stop().await;
}

/// `snapshot.lock.timeout.ms`: the snapshot's `FLUSH TABLES WITH READ LOCK`, queued behind a
/// session holding a table lock, gives up after the timeout with a retriable error that names
/// the key; once the other session lets go, the snapshot runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_lock_gives_up_after_its_timeout() {
    let (server, _db) = server_with_captured_rows(5).await;
    let mut holder = server.connect("app").await.unwrap();
    holder
        .query_drop("LOCK TABLES captured WRITE")
        .await
        .unwrap();
    let p = || {
        props(
            &server,
            &[
                ("snapshot.locking.mode", "extended"),
                ("snapshot.lock.timeout.ms", "1000"),
            ],
        )
    };
    let begun = Instant::now();
    let mut t = MySqlSourceTask::new();
    let err = t
        .start(SourceTaskContext::default(), p())
        .await
        .expect_err("the lock cannot be had");
    assert!(
        begun.elapsed() < Duration::from_secs(20),
        "it gave up in time"
    );
    assert!(err.message().contains("snapshot.lock.timeout.ms"), "{err}");
    assert!(
        err.is_retriable(),
        "a later attempt may get the lock: {err}"
    );
    holder.query_drop("UNLOCK TABLES").await.unwrap();
    let mut t = start(p(), Vec::new()).await;
    let snap = drain(&mut t, 5).await;
    assert_eq!(ids(&snap, "r"), vec![1, 2, 3, 4, 5]);
    t.stop().await;
}

/// Polls (committing like the engine) into `seen` until a notification of `aggregate` and
/// `kind` arrived.
async fn until_notified(
    t: &mut MySqlSourceTask,
    seen: &mut Vec<SourceRecord>,
    aggregate: &str,
    kind: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !notifications(seen, "notes")
        .iter()
        .any(|n| n.aggregate_type == aggregate && n.kind == kind)
    {
        seen.extend(drain(t, 1).await);
        assert!(
            Instant::now() < deadline,
            "no {aggregate} {kind}: {:?}",
            notifications(seen, "notes")
        );
    }
}

/// `notification.enabled.channels=sink`: the initial snapshot and an incremental one send
/// Debezium's notifications to `notification.sink.topic.name`; a restart after the snapshot
/// notifies it as skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_send_notifications_to_the_sink_topic() {
    let (server, mut db) = server_with_captured_rows(5).await;
    let p = props(
        &server,
        &[
            ("incremental.snapshot.chunk.size", "2"),
            ("notification.enabled.channels", "sink"),
            ("notification.sink.topic.name", "notes"),
        ],
    );
    let mut t = start(p.clone(), Vec::new()).await;
    let mut seen = Vec::new();
    until_notified(&mut t, &mut seen, "Initial Snapshot", "COMPLETED").await;
    let initial = notifications(&seen, "notes");
    let kinds: Vec<&str> = initial.iter().map(|n| n.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "STARTED",
            "IN_PROGRESS",
            "TABLE_SCAN_COMPLETED",
            "COMPLETED"
        ]
    );
    assert_eq!(
        initial[1].data["current_collection_in_progress"],
        "app.captured"
    );
    assert_eq!(initial[2].data["scanned_collection"], "app.captured");
    assert_eq!(initial[2].data["total_rows_scanned"], "5");
    assert_eq!(initial[2].data["status"], "SUCCEEDED");
    assert_eq!(initial[2].data["connector_name"], "cdc");
    assert_eq!(ids(&seen, "r").len(), 5);

    db.query_drop(
        r#"INSERT INTO debezium_signal VALUES ('sig-1', 'execute-snapshot', '{"data-collections": ["app\\\\.captured"], "type": "incremental"}');"#,
    )
    .await
    .unwrap();
    let mut incremental_seen = Vec::new();
    until_notified(
        &mut t,
        &mut incremental_seen,
        "Incremental Snapshot",
        "COMPLETED",
    )
    .await;
    let incremental = notifications(&incremental_seen, "notes");
    let kinds: Vec<&str> = incremental.iter().map(|n| n.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "STARTED",
            "IN_PROGRESS",
            "IN_PROGRESS",
            "IN_PROGRESS",
            "TABLE_SCAN_COMPLETED",
            "COMPLETED"
        ],
        "{incremental:?}"
    );
    assert_eq!(incremental[0].data["data_collections"], "app.captured");
    assert!(
        incremental.iter().all(|n| n.id == "sig-1"),
        "the signal's id: {incremental:?}"
    );
    assert_eq!(incremental[1].data["maximum_key"], "5");
    assert_eq!(incremental[3].data["last_processed_key"], "5");
    assert_eq!(incremental[4].data["total_rows_scanned"], "5");
    let committed: Committed = incremental_seen
        .iter()
        .rev()
        .find(|r| !r.source_offset.is_empty())
        .map(|r| vec![(r.source_partition.clone(), r.source_offset.clone())])
        .expect("an offset");
    t.stop().await;

    let mut again = start(p, committed).await;
    let mut restarted = Vec::new();
    until_notified(&mut again, &mut restarted, "Initial Snapshot", "SKIPPED").await;
    again.stop().await;
}

/// `snapshot.tables.order.by.row.count=descending`: the snapshot copies the largest table
/// first (by the server's estimate after ANALYZE), not in the captured order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_orders_tables_by_row_count_when_asked() {
    let (server, mut db) = server_with_captured_rows(3).await;
    let rows: Vec<String> = (1..=40).map(|i| format!("({i})")).collect();
    db.query_drop(format!(
        "CREATE TABLE other (id int PRIMARY KEY); INSERT INTO other VALUES {}; ANALYZE TABLE captured, other;",
        rows.join(", ")
    ))
    .await
    .unwrap();
    let p = props(
        &server,
        &[("snapshot.tables.order.by.row.count", "descending")],
    );
    let mut t = start(p, Vec::new()).await;
    let records = drain(&mut t, 43).await;
    let mut tables: Vec<&str> = records.iter().map(|r| r.topic.as_str()).collect();
    tables.dedup();
    assert_eq!(tables, ["cdc.app.other", "cdc.app.captured"]);
    t.stop().await;
}
