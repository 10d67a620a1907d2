//! Debezium's column mappers against a real MariaDB: `column.mask.with.<n>.chars`,
//! `column.mask.hash.<algorithm>.with.salt.<salt>` and `column.truncate.to.<n>.chars` change
//! the row images of snapshot and streamed events (a hash cut to the column's declared length),
//! never the keys; the truncated field carries Debezium's `truncateLength` parameter, and
//! `column.propagate.source.type` / `datatype.propagate.source.type` add the
//! `__debezium.source.column.*` parameters.

use std::time::{Duration, Instant};

use headwater_api::plugin::{Boundary, SourceTask, SourceTaskContext};
use headwater_api::{Properties, SourceRecord, Value};
use headwater_connector_mysql::MySqlSourceTask;
use headwater_tests::MariaDbServer;
use mysql_async::prelude::Queryable;

async fn drain(task: &mut MySqlSourceTask, n: usize) -> Vec<SourceRecord> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < n {
        let batch = task.poll().await.expect("poll");
        got.extend(batch.records);
        if batch.boundary == Boundary::Commit {
            if let Some(last) = got.last() {
                let c = (last.source_partition.clone(), last.source_offset.clone());
                task.commit(std::slice::from_ref(&c)).await.unwrap();
            }
        }
        assert!(Instant::now() < deadline, "{} of {n} records", got.len());
    }
    got
}

/// A task of a MariaDB connector on `server` (topic prefix `cdc`, no schema-change records),
/// with `extra` settings, started.
async fn started(server: &MariaDbServer, extra: &[(&str, &str)]) -> MySqlSourceTask {
    let port = server.port().to_string();
    let mut props: Properties = [
        ("connector.class", "mariadb"),
        ("database.hostname", "127.0.0.1"),
        ("database.port", port.as_str()),
        ("database.user", "root"),
        ("topic.prefix", "cdc"),
        ("include.schema.changes", "false"),
        ("poll.interval.ms", "100"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (k, v) in extra {
        props.insert((*k).to_owned(), (*v).to_owned());
    }
    let mut task = MySqlSourceTask::new();
    task.start(SourceTaskContext::default(), props)
        .await
        .unwrap();
    task
}

fn field(r: &SourceRecord, image: &str, column: &str) -> Option<Value> {
    r.value
        .as_struct()?
        .get(image)?
        .as_struct()?
        .get(column)
        .cloned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn column_mappers_mask_hash_and_truncate_row_images_but_not_keys() {
    let server = MariaDbServer::start().unwrap();
    server.create_database("app").await.unwrap();
    let mut db = server.connect("app").await.unwrap();
    db.query_drop(
        "CREATE TABLE users (email varchar(64) PRIMARY KEY, ssn varchar(11), token varchar(12), bio text, photo varbinary(32), age int, note text);
         INSERT INTO users VALUES ('a@example.com', '123-45-6789', 'secret', 'a long biography', x'0102030405', 41, 'n');
         CREATE TABLE notes (id int PRIMARY KEY); INSERT INTO notes VALUES (1);",
    )
    .await
    .unwrap();
    let mut task = started(
        &server,
        &[
            ("database.server.id", "7201"),
            ("table.include.list", "app.users,app.notes"),
            ("column.exclude.list", "app.users.note"),
            ("snapshot.include.collection.list", "app.users"),
            ("skip.messages.without.change", "true"),
            ("column.mask.with.4.chars", "app.users.(ssn|email|age)"),
            (
                "column.mask.hash.SHA-256.with.salt.pepper",
                "app.users.token",
            ),
            (
                "column.truncate.to.6.chars",
                "app.users.bio,app.users.photo",
            ),
        ],
    )
    .await;
    let snap = drain(&mut task, 1).await;
    assert_eq!(
        snap.len(),
        1,
        "snapshot.include.collection.list leaves notes out"
    );
    db.query_drop(
        "UPDATE users SET note = 'changed' WHERE email = 'a@example.com';
         INSERT INTO users VALUES ('b@example.com', NULL, NULL, NULL, NULL, NULL, NULL);
         UPDATE users SET bio = 'short' WHERE email = 'a@example.com';
         INSERT INTO notes VALUES (2);",
    )
    .await
    .unwrap();
    let stream = drain(&mut task, 3).await;
    task.stop().await;
    assert_eq!(
        stream.iter().map(|r| r.topic.as_str()).collect::<Vec<_>>(),
        ["cdc.app.users", "cdc.app.users", "cdc.app.notes"],
        "an update of excluded columns only is skipped (skip.messages.without.change); notes is streamed"
    );

    // v1 hashes the value as Java serialises a String: AC ED 00 05 74 <u16 length> <bytes>.
    let token_hash = {
        let mut java = vec![0xAC, 0xED, 0x00, 0x05, 0x74, 0x00, 0x06];
        java.extend_from_slice(b"secret");
        let mut salted = b"pepper".to_vec();
        salted.extend_from_slice(&java);
        let digest = <sha2::Sha256 as sha2::Digest>::digest(&salted);
        hex(&digest)[..12].to_owned()
    };
    for (r, what) in [(&snap[0], "snapshot"), (&stream[1], "update")] {
        assert_eq!(
            field(r, "after", "ssn"),
            Some(Value::String("****".into())),
            "{what}"
        );
        assert_eq!(
            field(r, "after", "email"),
            Some(Value::String("****".into())),
            "{what}"
        );
        assert_eq!(
            field(r, "after", "age"),
            Some(Value::Int32(41)),
            "{what}: not characters"
        );
        assert_eq!(
            field(r, "after", "token"),
            Some(Value::String(token_hash.clone())),
            "{what}: cut to varchar(12)"
        );
        assert_eq!(
            field(r, "after", "photo"),
            Some(Value::Bytes(vec![1, 2, 3, 4, 5])),
            "{what}"
        );
        let key = r.key.as_struct().unwrap();
        assert_eq!(
            key.get("email"),
            Some(&Value::String("a@example.com".into())),
            "{what}: keys are not masked"
        );
    }
    assert_eq!(
        field(&snap[0], "after", "bio"),
        Some(Value::String("a long".into()))
    );
    assert_eq!(
        field(&stream[1], "before", "bio"),
        Some(Value::String("a long".into()))
    );
    assert_eq!(
        field(&stream[1], "after", "bio"),
        Some(Value::String("short".into()))
    );
    let inserted = &stream[0];
    assert_eq!(
        field(inserted, "after", "ssn"),
        Some(Value::String("****".into())),
        "a null is masked too, as in Debezium"
    );
    assert_eq!(
        field(inserted, "after", "token"),
        Some(Value::Null),
        "a hashed null stays null"
    );
    let after = snap[0]
        .value
        .as_struct()
        .unwrap()
        .get("after")
        .unwrap()
        .as_struct()
        .unwrap()
        .schema()
        .clone();
    assert_eq!(
        after
            .field("bio")
            .unwrap()
            .schema()
            .parameter("truncateLength"),
        Some("6")
    );
    assert_eq!(
        after
            .field("ssn")
            .unwrap()
            .schema()
            .parameter("truncateLength"),
        None
    );
    for masked in ["age", "token", "ssn", "email"] {
        assert_eq!(
            after.field(masked).unwrap().schema().parameter("masked"),
            Some("true"),
            "{masked}"
        );
    }
    let key = snap[0].key.as_struct().unwrap();
    assert_eq!(
        key.schema()
            .field("email")
            .unwrap()
            .schema()
            .parameter("masked"),
        None
    );
}

/// The `__debezium.source.column.*` parameters of a value-schema field, in order.
fn propagated(r: &SourceRecord, column: &str) -> Vec<(String, String)> {
    let after = r
        .value_schema
        .as_ref()
        .unwrap()
        .field("after")
        .unwrap()
        .schema()
        .clone();
    let field = after.field(column).unwrap().schema().clone();
    field
        .parameters()
        .map(|p| {
            p.iter()
                .filter(|(k, _)| k.starts_with("__debezium.source.column."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn propagated_source_types_are_field_parameters_in_snapshot_and_stream() {
    let server = MariaDbServer::start().unwrap();
    server.create_database("app").await.unwrap();
    let mut db = server.connect("app").await.unwrap();
    db.query_drop(
        "CREATE TABLE items (id int(10) unsigned AUTO_INCREMENT PRIMARY KEY, name varchar(40) NOT NULL,
           amount decimal(12,3), flag tinyint(1), kind enum('a','b','c'), tags set('x','y'),
           made datetime(3), note text, big bigint(20) unsigned zerofill, plain int);
         INSERT INTO items (name, amount, flag, kind, tags, made, note, big, plain)
           VALUES ('a', 1.5, 1, 'b', 'x,y', '2024-01-02 03:04:05.678', 'n', 7, 8);",
    )
    .await
    .unwrap();
    let mut task = started(
        &server,
        &[
            ("database.server.id", "7202"),
            ("table.include.list", "app.items"),
            (
                "column.propagate.source.type",
                "app.items.(id|name|amount|flag|note)",
            ),
            (
                "datatype.propagate.source.type",
                ".+\\.(enum|SET|DATETIME|BIGINT UNSIGNED ZEROFILL)",
            ),
        ],
    )
    .await;
    let snap = drain(&mut task, 1).await;
    db.query_drop("INSERT INTO items (name) VALUES ('b')")
        .await
        .unwrap();
    let stream = drain(&mut task, 1).await;
    db.query_drop(
        "ALTER TABLE items MODIFY name varchar(80) NOT NULL; INSERT INTO items (name) VALUES ('c')",
    )
    .await
    .unwrap();
    let altered = drain(&mut task, 1).await;
    task.stop().await;

    // (column, type, length, scale) as Debezium's snapshot reads MariaDB's SHOW CREATE TABLE.
    let expected: [(&str, &str, Option<&str>, Option<&str>); 9] = [
        ("id", "INT UNSIGNED", Some("10"), None),
        ("name", "VARCHAR", Some("40"), None),
        ("amount", "DECIMAL", Some("12"), Some("3")),
        ("flag", "TINYINT", Some("1"), None),
        ("kind", "ENUM", Some("1"), None),
        ("tags", "SET", Some("3"), None),
        ("made", "DATETIME", Some("3"), None),
        ("note", "TEXT", None, None),
        ("big", "BIGINT UNSIGNED ZEROFILL", Some("20"), None),
    ];
    for (phase, record) in [("snapshot", &snap[0]), ("stream", &stream[0])] {
        for (column, type_name, length, scale) in expected {
            let mut want = vec![(
                "__debezium.source.column.type".to_owned(),
                type_name.to_owned(),
            )];
            if let Some(l) = length {
                want.push(("__debezium.source.column.length".into(), l.into()));
            }
            if let Some(s) = scale {
                want.push(("__debezium.source.column.scale".into(), s.into()));
            }
            want.push(("__debezium.source.column.name".into(), column.into()));
            assert_eq!(propagated(record, column), want, "{phase}: {column}");
        }
        assert!(
            propagated(record, "plain").is_empty(),
            "{phase}: an unmatched column has none"
        );
        let key = record.key_schema.as_ref().unwrap();
        assert_eq!(
            key.field("id").unwrap().schema().parameters(),
            None,
            "{phase}: keys have none, as in Debezium"
        );
    }
    assert_eq!(
        propagated(&altered[0], "name")[1],
        ("__debezium.source.column.length".into(), "80".into()),
        "a DDL changes the length"
    );
}
