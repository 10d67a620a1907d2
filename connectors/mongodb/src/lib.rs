//! `headwater-connector-mongodb`: a MongoDB source connector on change streams that emits
//! Debezium's MongoDB change events, so it can replace
//! `io.debezium.connector.mongodb.MongoDbConnector` with the same connector JSON.
pub mod extjson;
