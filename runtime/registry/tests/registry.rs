//! The embedded registry against a real log in a temp dir: the REST API as clients call it,
//! compatibility per level, deletes, persistence across a restart, and the Avro converter
//! registering evolving source schemas.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use headwater_api::{Schema, SchemaBuilder, Struct, Value};
use headwater_format::avro::registry::SchemaRegistry;
use headwater_format::avro::{AvroConverter, AvroConverterConfig};
use headwater_format::converters::Converter;
use headwater_log::{Log, LogOptions};
use headwater_registry::{http, Registry};
use serde_json::{json, Value as Json};
use tower::ServiceExt;

fn open(dir: &std::path::Path) -> (Log, Registry) {
    let log = Log::open(dir, LogOptions::default()).unwrap();
    let registry = Registry::open(log.clone()).unwrap();
    (log, registry)
}

async fn call(
    registry: &Registry,
    method: &str,
    path: &str,
    body: Option<Json>,
) -> (StatusCode, Json) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/vnd.schemaregistry.v1+json");
    let req = match body {
        Some(b) => req.body(Body::from(b.to_string())).unwrap(),
        None => req.body(Body::empty()).unwrap(),
    };
    let resp = http::router(registry.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    assert_eq!(
        resp.headers().get("content-type").unwrap(),
        "application/vnd.schemaregistry.v1+json"
    );
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

fn record(fields: &str) -> String {
    format!(r#"{{"type":"record","name":"Value","namespace":"db.public.t","fields":[{fields}]}}"#)
}

#[tokio::test]
async fn rest_api_registers_looks_up_deletes_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (log, r) = open(dir.path());
    let v1 = record(r#"{"name":"id","type":"int"}"#);
    let v2 = record(
        r#"{"name":"id","type":"int"},{"name":"n","type":["null","string"],"default":null}"#,
    );

    let (s, b) = call(
        &r,
        "POST",
        "/subjects/t-value/versions",
        Some(json!({"schema": v1})),
    )
    .await;
    assert_eq!((s, &b), (StatusCode::OK, &json!({"id": 1})));
    // The same schema again: same id, no new version; under another subject: same id.
    let (_, b) = call(
        &r,
        "POST",
        "/subjects/t-value/versions",
        Some(json!({"schema": v1, "schemaType": "AVRO"})),
    )
    .await;
    assert_eq!(b, json!({"id": 1}));
    let (_, b) = call(
        &r,
        "POST",
        "/subjects/other-value/versions",
        Some(json!({"schema": v1})),
    )
    .await;
    assert_eq!(b, json!({"id": 1}));
    let (_, b) = call(
        &r,
        "POST",
        "/subjects/t-value/versions",
        Some(json!({"schema": v2})),
    )
    .await;
    assert_eq!(b, json!({"id": 2}));

    let (_, b) = call(&r, "GET", "/subjects", None).await;
    assert_eq!(b, json!(["other-value", "t-value"]));
    let (_, b) = call(&r, "GET", "/subjects/t-value/versions", None).await;
    assert_eq!(b, json!([1, 2]));
    let (_, b) = call(&r, "GET", "/subjects/t-value/versions/latest", None).await;
    assert_eq!(b["version"], 2);
    assert_eq!(b["id"], 2);
    assert_eq!(
        serde_json::from_str::<Json>(b["schema"].as_str().unwrap()).unwrap(),
        serde_json::from_str::<Json>(&v2).unwrap()
    );
    let (_, b) = call(&r, "GET", "/schemas/ids/1", None).await;
    assert_eq!(
        serde_json::from_str::<Json>(b["schema"].as_str().unwrap()).unwrap(),
        serde_json::from_str::<Json>(&v1).unwrap()
    );
    let (_, b) = call(&r, "GET", "/schemas/ids/1/versions", None).await;
    assert_eq!(
        b,
        json!([{"subject": "other-value", "version": 1}, {"subject": "t-value", "version": 1}])
    );
    let (_, b) = call(&r, "POST", "/subjects/t-value", Some(json!({"schema": v1}))).await;
    assert_eq!(
        (b["version"].clone(), b["id"].clone()),
        (json!(1), json!(1))
    );

    // Errors with Confluent's codes.
    let (s, b) = call(&r, "GET", "/subjects/nope/versions", None).await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::NOT_FOUND, json!(40401))
    );
    let (s, b) = call(&r, "GET", "/subjects/t-value/versions/9", None).await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::NOT_FOUND, json!(40402))
    );
    let (s, b) = call(&r, "GET", "/subjects/t-value/versions/zero", None).await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!(42202))
    );
    let (s, b) = call(&r, "GET", "/schemas/ids/77", None).await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::NOT_FOUND, json!(40403))
    );
    let (s, b) = call(
        &r,
        "POST",
        "/subjects/t-value/versions",
        Some(json!({"schema": "{\"type\":\"recrod\"}"})),
    )
    .await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!(42201))
    );
    let (s, b) = call(
        &r,
        "POST",
        "/subjects/t-value/versions",
        Some(json!({"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF"})),
    )
    .await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!(42201))
    );
    assert!(b["message"].as_str().unwrap().contains("AVRO only"));
    let (s, b) = call(
        &r,
        "PUT",
        "/config",
        Some(json!({"compatibility": "SIDEWAYS"})),
    )
    .await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!(42203))
    );

    // An incompatible schema (BACKWARD by default) is refused with 409 and the rule.
    let changed = record(r#"{"name":"id","type":"string"}"#);
    let (s, b) = call(
        &r,
        "POST",
        "/subjects/t-value/versions",
        Some(json!({"schema": changed})),
    )
    .await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::CONFLICT, json!(409))
    );
    let msg = b["message"].as_str().unwrap();
    assert!(
        msg.contains("incompatible with an earlier schema for subject \"t-value\""),
        "{msg}"
    );
    assert!(msg.contains("rule: BACKWARD"), "{msg}");
    let (_, b) = call(
        &r,
        "POST",
        "/compatibility/subjects/t-value/versions/latest?verbose=true",
        Some(json!({"schema": changed})),
    )
    .await;
    assert_eq!(b["is_compatible"], false);
    assert!(!b["messages"].as_array().unwrap().is_empty());
    let (_, b) = call(
        &r,
        "POST",
        "/compatibility/subjects/t-value/versions/1",
        Some(json!({"schema": v2})),
    )
    .await;
    assert_eq!(b, json!({"is_compatible": true}));

    // Subject-level config: NONE lets it through.
    let (s, _) = call(&r, "GET", "/config/t-value", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, b) = call(&r, "GET", "/config/t-value?defaultToGlobal=true", None).await;
    assert_eq!(b, json!({"compatibilityLevel": "BACKWARD"}));
    let (_, b) = call(
        &r,
        "PUT",
        "/config/t-value",
        Some(json!({"compatibility": "none"})),
    )
    .await;
    assert_eq!(b, json!({"compatibility": "NONE"}));
    let (_, b) = call(
        &r,
        "POST",
        "/subjects/t-value/versions",
        Some(json!({"schema": changed})),
    )
    .await;
    assert_eq!(b, json!({"id": 3}));
    let (_, b) = call(
        &r,
        "PUT",
        "/config",
        Some(json!({"compatibility": "FULL_TRANSITIVE"})),
    )
    .await;
    assert_eq!(b, json!({"compatibility": "FULL_TRANSITIVE"}));

    // Soft delete hides, permanent delete needs a soft one first.
    let (s, b) = call(&r, "DELETE", "/subjects/other-value?permanent=true", None).await;
    assert_eq!(
        (s, b["error_code"].clone()),
        (StatusCode::NOT_FOUND, json!(40405))
    );
    let (_, b) = call(&r, "DELETE", "/subjects/other-value", None).await;
    assert_eq!(b, json!([1]));
    let (_, b) = call(&r, "GET", "/subjects", None).await;
    assert_eq!(b, json!(["t-value"]));
    let (_, b) = call(&r, "GET", "/subjects?deleted=true", None).await;
    assert_eq!(b, json!(["other-value", "t-value"]));
    let (_, b) = call(&r, "DELETE", "/subjects/other-value?permanent=true", None).await;
    assert_eq!(b, json!([1]));
    let (_, b) = call(&r, "DELETE", "/subjects/t-value/versions/3", None).await;
    assert_eq!(b, json!(3));
    let (_, b) = call(&r, "GET", "/subjects/t-value/versions", None).await;
    assert_eq!(b, json!([1, 2]));

    // Restart: everything is read back from the log.
    drop(r);
    log.close().unwrap();
    drop(log);
    let (_log, r) = open(dir.path());
    let (_, b) = call(&r, "GET", "/subjects?deleted=true", None).await;
    assert_eq!(b, json!(["t-value"]));
    let (_, b) = call(&r, "GET", "/subjects/t-value/versions?deleted=true", None).await;
    assert_eq!(b, json!([1, 2, 3]));
    let (_, b) = call(&r, "GET", "/config", None).await;
    assert_eq!(b, json!({"compatibilityLevel": "FULL_TRANSITIVE"}));
    let (_, b) = call(&r, "GET", "/config/t-value", None).await;
    assert_eq!(b, json!({"compatibilityLevel": "NONE"}));
    // Ids keep counting after a restart; a new version number follows the deleted one.
    let v4 =
        record(r#"{"name":"id","type":"int"},{"name":"m","type":["null","long"],"default":null}"#);
    let (_, b) = call(
        &r,
        "POST",
        "/subjects/t-value/versions",
        Some(json!({"schema": v4})),
    )
    .await;
    assert_eq!(b, json!({"id": 4}));
    let (_, b) = call(&r, "GET", "/subjects/t-value/versions/latest", None).await;
    assert_eq!(b["version"], 4);
}

fn avro_converter(registry: &Registry) -> AvroConverter {
    let mut props = headwater_api::Properties::new();
    props.insert("converter.type".into(), "value".into());
    AvroConverter::with_registry(
        AvroConverterConfig::from_props(&props).unwrap(),
        Arc::new(registry.clone()),
    )
}

#[test]
fn source_schema_evolution_registers_versions_and_refuses_incompatible_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, r) = open(dir.path());
    let c = avro_converter(&r);
    let v1 = SchemaBuilder::struct_()
        .name("db.public.orders.Value")
        .field("id", Schema::int32())
        .field("qty", Schema::int32())
        .build_ref();
    let row = |s: &headwater_api::SchemaRef, vals: Vec<Value>| {
        Value::Struct(Struct::from_values(s.clone(), vals).unwrap())
    };
    let b1 = c
        .from_connect_data(
            "db.public.orders",
            Some(&v1),
            &row(&v1, vec![Value::Int32(1), Value::Int32(2)]),
        )
        .unwrap()
        .unwrap();
    // A column added (optional, as Debezium makes nullable columns) and a type widened.
    let v2 = SchemaBuilder::struct_()
        .name("db.public.orders.Value")
        .field("id", Schema::int32())
        .field("qty", Schema::int64())
        .field("note", Schema::optional_string())
        .build_ref();
    let b2 = c
        .from_connect_data(
            "db.public.orders",
            Some(&v2),
            &row(
                &v2,
                vec![Value::Int32(1), Value::Int64(3), Value::from("x")],
            ),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        r.versions("db.public.orders-value", false).unwrap(),
        vec![1, 2]
    );
    assert_ne!(b1[1..5], b2[1..5], "a new schema id");
    // Old and new records still read back.
    assert_eq!(
        c.to_connect_data("t", Some(&b1))
            .unwrap()
            .value
            .as_struct()
            .unwrap()
            .values()[1],
        Value::Int32(2)
    );
    assert_eq!(
        c.to_connect_data("t", Some(&b2))
            .unwrap()
            .value
            .as_struct()
            .unwrap()
            .values()[2],
        Value::from("x")
    );
    // A column whose type changes incompatibly fails the record, naming subject, rule and schemas.
    let v3 = SchemaBuilder::struct_()
        .name("db.public.orders.Value")
        .field("id", Schema::string())
        .field("qty", Schema::int64())
        .field("note", Schema::optional_string())
        .build_ref();
    let err = c
        .from_connect_data(
            "db.public.orders",
            Some(&v3),
            &row(&v3, vec![Value::from("a"), Value::Int64(3), Value::Null]),
        )
        .unwrap_err();
    let msg = err.message();
    assert!(msg.contains("subject \"db.public.orders-value\""), "{msg}");
    assert!(msg.contains("rule: BACKWARD"), "{msg}");
    assert!(msg.contains("New schema: {"), "{msg}");
    assert!(msg.contains("Latest registered version 2"), "{msg}");
    // Nothing registered for it; compatible writes go on.
    assert_eq!(
        r.versions("db.public.orders-value", false).unwrap(),
        vec![1, 2]
    );
    assert!(c
        .from_connect_data(
            "db.public.orders",
            Some(&v2),
            &row(&v2, vec![Value::Int32(5), Value::Int64(6), Value::Null])
        )
        .is_ok());
    assert_eq!(r.latest("db.public.orders-value").unwrap().version, 2);
}

#[test]
fn equal_schemas_written_with_other_key_orders_share_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, r) = open(dir.path());
    let a = r#"{"type":"record","name":"V","fields":[{"name":"id","type":"int"}]}"#;
    let b = r#"{"fields":[{"type":"int","name":"id"}],"name":"V","type":"record"}"#;
    let id = r.register_schema("s1", a).unwrap();
    assert_eq!(r.register_schema("s2", b).unwrap(), id);
    assert_eq!(r.versions("s1", false).unwrap(), vec![1]);
    assert_eq!(r.lookup_schema("s1", b, false).unwrap().id, id);
}
