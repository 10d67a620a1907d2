//! Schemas across DDL: ADD / DROP / MODIFY / RENAME COLUMN and RENAME TABLE in the middle of the
//! stream, each followed by a row whose record must carry the table's shape at that binlog
//! position (from TABLE_MAP full metadata), including rows read after a restart from the
//! committed offset with DDL that happened while the task was stopped.

use std::time::{Duration, Instant};

use headwater_api::plugin::{Boundary, SourceTask, SourceTaskContext};
use headwater_api::{OffsetMap, Properties, SchemaType, SourceRecord, Value};
use headwater_connector_mysql::MySqlSourceTask;
use headwater_tests::MariaDbServer;
use mysql_async::prelude::Queryable;

fn props(server: &MariaDbServer) -> Properties {
    [
        ("connector.class", "mariadb"),
        ("database.hostname", "127.0.0.1"),
        ("database.port", &server.port().to_string()),
        ("database.user", "root"),
        ("database.server.id", "7001"),
        ("topic.prefix", "cdc"),
        ("database.include.list", "app"),
        ("include.schema.changes", "false"),
        ("poll.interval.ms", "100"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

/// Polls until `n` data records arrived, committing at transaction boundaries.
async fn collect(
    task: &mut MySqlSourceTask,
    n: usize,
    committed: &mut Option<(OffsetMap, OffsetMap)>,
) -> Vec<SourceRecord> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        let batch = task.poll().await.expect("poll");
        got.extend(batch.records);
        if batch.boundary == Boundary::Commit {
            if let Some(last) = got.last() {
                let c = (last.source_partition.clone(), last.source_offset.clone());
                task.commit(std::slice::from_ref(&c)).await.unwrap();
                *committed = Some(c);
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out with {} of {n}",
            got.len()
        );
    }
    got
}

/// A DDL statement, the insert after it and the expected `after` fields.
type Step = (
    &'static str,
    &'static str,
    Vec<(&'static str, SchemaType, Value)>,
);

fn after_fields(r: &SourceRecord) -> Vec<(String, SchemaType, Value)> {
    let v = r.value.as_struct().unwrap();
    let after = v.get("after").unwrap().as_struct().unwrap();
    after
        .schema()
        .fields()
        .iter()
        .map(|f| {
            (
                f.name().to_owned(),
                f.schema().schema_type(),
                after.get(f.name()).unwrap().clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_shapes_follow_ddl_across_restarts() {
    let server = MariaDbServer::start().expect("MariaDB");
    server.create_database("app").await.unwrap();
    let mut db = server.connect("app").await.unwrap();
    db.query_drop("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10))")
        .await
        .unwrap();
    db.query_drop("INSERT INTO t VALUES (1, 10, 'x')")
        .await
        .unwrap();
    let mut task = MySqlSourceTask::new();
    let mut committed = None;
    task.start(SourceTaskContext::default(), props(&server))
        .await
        .unwrap();
    let snap = collect(&mut task, 1, &mut committed).await;
    use SchemaType::*;
    assert_eq!(
        after_fields(&snap[0]),
        [
            ("id".into(), Int32, Value::Int32(1)),
            ("a".into(), Int32, Value::Int32(10)),
            ("b".into(), String, Value::String("x".into()))
        ]
    );
    let steps: [Step; 4] = [
        (
            "ALTER TABLE t ADD COLUMN c DATE",
            "INSERT INTO t VALUES (2, 20, 'y', '1970-01-02')",
            vec![
                ("id", Int32, Value::Int32(2)),
                ("a", Int32, Value::Int32(20)),
                ("b", String, "y".into()),
                ("c", Int32, Value::Int32(1)),
            ],
        ),
        (
            "ALTER TABLE t DROP COLUMN b",
            "INSERT INTO t VALUES (3, 30, NULL)",
            vec![
                ("id", Int32, Value::Int32(3)),
                ("a", Int32, Value::Int32(30)),
                ("c", Int32, Value::Null),
            ],
        ),
        (
            "ALTER TABLE t RENAME COLUMN a TO a2",
            "INSERT INTO t VALUES (4, 40, NULL)",
            vec![
                ("id", Int32, Value::Int32(4)),
                ("a2", Int32, Value::Int32(40)),
                ("c", Int32, Value::Null),
            ],
        ),
        (
            "ALTER TABLE t MODIFY COLUMN a2 BIGINT",
            "INSERT INTO t VALUES (5, 5000000000, NULL)",
            vec![
                ("id", Int32, Value::Int32(5)),
                ("a2", Int64, Value::Int64(5_000_000_000)),
                ("c", Int32, Value::Null),
            ],
        ),
    ];
    for (ddl, insert, want) in &steps {
        db.query_drop(*ddl).await.unwrap();
        db.query_drop(*insert).await.unwrap();
        let got = collect(&mut task, 1, &mut committed).await;
        let want: Vec<_> = want
            .iter()
            .map(|(n, t, v)| ((*n).to_owned(), *t, v.clone()))
            .collect();
        assert_eq!(after_fields(&got[0]), want, "after {ddl}");
    }
    // Stopped; DDL and rows meanwhile, including a table rename.
    task.stop().await;
    db.query_drop("INSERT INTO t VALUES (6, 6, NULL)")
        .await
        .unwrap();
    db.query_drop("ALTER TABLE t ADD COLUMN d VARCHAR(5) NOT NULL DEFAULT 'dd'")
        .await
        .unwrap();
    db.query_drop("INSERT INTO t (id) VALUES (7)")
        .await
        .unwrap();
    db.query_drop("RENAME TABLE t TO t2").await.unwrap();
    db.query_drop("INSERT INTO t2 (id, a2) VALUES (8, 8)")
        .await
        .unwrap();
    let mut task = MySqlSourceTask::new();
    task.start(
        SourceTaskContext {
            committed_offsets: committed.clone().into_iter().collect(),
            ..Default::default()
        },
        props(&server),
    )
    .await
    .unwrap();
    let got = collect(&mut task, 3, &mut committed).await;
    assert_eq!(got[0].topic, "cdc.app.t");
    assert_eq!(
        after_fields(&got[0]).len(),
        3,
        "row 6 has the pre-ADD shape"
    );
    assert_eq!(
        after_fields(&got[1]).last().unwrap(),
        &("d".to_owned(), String, Value::String("dd".into()))
    );
    assert_eq!(
        got[2].topic, "cdc.app.t2",
        "renamed table gets its new topic"
    );
    assert_eq!(after_fields(&got[2])[0].2, Value::Int32(8));
    let ids: Vec<_> = got.iter().map(|r| after_fields(r)[0].2.clone()).collect();
    assert_eq!(
        ids,
        [Value::Int32(6), Value::Int32(7), Value::Int32(8)],
        "nothing repeated"
    );
    task.stop().await;
    db.disconnect().await.unwrap();
}
