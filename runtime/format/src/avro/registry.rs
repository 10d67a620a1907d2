//! What the Avro converter needs of a schema registry ([`SchemaRegistry`]), the HTTP client for
//! a Confluent-compatible registry ([`HttpRegistry`]), and the table of registries served by
//! this very process ([`register_local`]), which converters call directly instead of over HTTP.
//!
//! Invariants:
//! - a URL found in the local table never goes over the network (the worker's embedded
//!   registry, whatever address it listens on);
//! - the HTTP client is blocking (`ureq`): converters are synchronous, and they call the
//!   registry only for a schema they have not seen (then cache the answer), as Confluent's
//!   serialisers do;
//! - registry errors keep the registry's `error_code` and message, so a converter can say why
//!   a schema was refused (409 incompatible, 42201 invalid, 40401 unknown subject, ...).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{json, Value as Json};

/// A schema as the registry holds it under a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredSchema {
    pub subject: String,
    pub version: i32,
    pub id: i32,
    pub schema: String,
}

/// An error answered by a registry (or met reaching it: status 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryError {
    pub status: u16,
    pub error_code: i32,
    pub message: String,
}

impl RegistryError {
    pub fn new(status: u16, error_code: i32, message: impl Into<String>) -> Self {
        RegistryError {
            status,
            error_code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.status == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{} (error code {})", self.message, self.error_code)
        }
    }
}

/// The registry operations the Avro converter uses (Avro schemas only, no references).
pub trait SchemaRegistry: Send + Sync {
    /// Registers `schema` under `subject` (or finds it there) and returns its global id.
    fn register(&self, subject: &str, schema: &str, normalize: bool) -> Result<i32, RegistryError>;
    /// The version of `subject` holding `schema`.
    fn lookup(
        &self,
        subject: &str,
        schema: &str,
        normalize: bool,
    ) -> Result<RegisteredSchema, RegistryError>;
    /// The newest version of `subject`.
    fn latest(&self, subject: &str) -> Result<RegisteredSchema, RegistryError>;
    /// The schema text with a global id.
    fn schema_by_id(&self, id: i32) -> Result<String, RegistryError>;
}

type LocalTable = Vec<(String, Arc<dyn SchemaRegistry>)>;

static LOCAL: Mutex<LocalTable> = Mutex::new(Vec::new());

/// `http://Host:Port/` -> `http://host:port` (what the local table is keyed by).
fn normalize_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
            let mut out = format!(
                "{}://{}",
                scheme.to_ascii_lowercase(),
                host.to_ascii_lowercase()
            );
            if !path.is_empty() {
                out.push('/');
                out.push_str(path);
            }
            out
        }
        None => url.to_ascii_lowercase(),
    }
}

/// Makes `registry` answer for each of `urls` in this process (the first registered is also
/// the default for converters without `schema.registry.url`).
pub fn register_local(urls: &[String], registry: Arc<dyn SchemaRegistry>) {
    let mut table = LOCAL.lock().unwrap_or_else(|e| e.into_inner());
    for url in urls {
        let key = normalize_url(url);
        table.retain(|(k, _)| *k != key);
        table.push((key, registry.clone()));
    }
}

/// Removes every URL served by `registry` from the local table.
pub fn unregister_local(registry: &Arc<dyn SchemaRegistry>) {
    let mut table = LOCAL.lock().unwrap_or_else(|e| e.into_inner());
    table.retain(|(_, r)| !Arc::ptr_eq(r, registry));
}

/// The local registry serving `url`.
pub fn local_registry(url: &str) -> Option<Arc<dyn SchemaRegistry>> {
    let key = normalize_url(url);
    let table = LOCAL.lock().unwrap_or_else(|e| e.into_inner());
    table
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, r)| r.clone())
}

/// The registry of this process (the worker's embedded one), if it has one.
pub fn default_local_registry() -> Option<Arc<dyn SchemaRegistry>> {
    let table = LOCAL.lock().unwrap_or_else(|e| e.into_inner());
    table.first().map(|(_, r)| r.clone())
}

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A Confluent-compatible registry over HTTP (the first URL that answers wins, as Confluent's
/// client tries its URLs in turn).
pub struct HttpRegistry {
    urls: Vec<String>,
    agent: ureq::Agent,
    authorization: Option<String>,
}

impl HttpRegistry {
    /// `authorization` is a ready `Authorization` header value (Basic or Bearer).
    pub fn new(urls: Vec<String>, authorization: Option<String>) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .into();
        HttpRegistry {
            urls: urls
                .into_iter()
                .map(|u| u.trim().trim_end_matches('/').to_owned())
                .collect(),
            agent,
            authorization,
        }
    }

    /// `Basic base64(user:password)` for `basic.auth.user.info`.
    pub fn basic_auth(user_info: &str) -> String {
        format!("Basic {}", BASE64.encode(user_info))
    }

    fn call(&self, method: &str, path: &str, body: Option<&Json>) -> Result<Json, RegistryError> {
        let mut last = RegistryError::new(0, 50001, "no schema.registry.url configured");
        for base in &self.urls {
            let url = format!("{base}{path}");
            let result = match (method, body) {
                ("POST", Some(b)) => {
                    let mut req = self.agent.post(&url).header("Content-Type", CONTENT_TYPE);
                    if let Some(a) = &self.authorization {
                        req = req.header("Authorization", a);
                    }
                    req.send(b.to_string().as_bytes())
                }
                _ => {
                    let mut req = self.agent.get(&url).header("Accept", CONTENT_TYPE);
                    if let Some(a) = &self.authorization {
                        req = req.header("Authorization", a);
                    }
                    req.call()
                }
            };
            let mut response = match result {
                Ok(r) => r,
                Err(e) => {
                    last = RegistryError::new(
                        0,
                        50002,
                        format!("schema registry {base} unreachable: {e}"),
                    );
                    continue;
                }
            };
            let status = response.status().as_u16();
            let text = response.body_mut().read_to_string().map_err(|e| {
                RegistryError::new(status, 50002, format!("reading the answer of {url}: {e}"))
            })?;
            let json: Json = serde_json::from_str(&text).unwrap_or(Json::String(text.clone()));
            if (200..300).contains(&status) {
                return Ok(json);
            }
            let error_code = json
                .get("error_code")
                .and_then(Json::as_i64)
                .map_or(i32::from(status) * 100, |c| c as i32);
            let message = json.get("message").and_then(Json::as_str).map_or_else(
                || format!("HTTP {status} from {url}: {text}"),
                str::to_owned,
            );
            return Err(RegistryError::new(status, error_code, message));
        }
        Err(last)
    }
}

fn registered(json: &Json, subject: &str) -> Result<RegisteredSchema, RegistryError> {
    let bad = || RegistryError::new(0, 50002, format!("unexpected registry answer: {json}"));
    Ok(RegisteredSchema {
        subject: json
            .get("subject")
            .and_then(Json::as_str)
            .unwrap_or(subject)
            .to_owned(),
        version: json.get("version").and_then(Json::as_i64).ok_or_else(bad)? as i32,
        id: json.get("id").and_then(Json::as_i64).ok_or_else(bad)? as i32,
        schema: json
            .get("schema")
            .and_then(Json::as_str)
            .ok_or_else(bad)?
            .to_owned(),
    })
}

/// Percent-encodes a subject for a URL path.
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl SchemaRegistry for HttpRegistry {
    fn register(&self, subject: &str, schema: &str, normalize: bool) -> Result<i32, RegistryError> {
        let path = format!(
            "/subjects/{}/versions?normalize={normalize}",
            encode_segment(subject)
        );
        let answer = self.call("POST", &path, Some(&json!({ "schema": schema })))?;
        answer
            .get("id")
            .and_then(Json::as_i64)
            .map(|id| id as i32)
            .ok_or_else(|| {
                RegistryError::new(0, 50002, format!("unexpected registry answer: {answer}"))
            })
    }

    fn lookup(
        &self,
        subject: &str,
        schema: &str,
        normalize: bool,
    ) -> Result<RegisteredSchema, RegistryError> {
        let path = format!(
            "/subjects/{}?normalize={normalize}",
            encode_segment(subject)
        );
        let answer = self.call("POST", &path, Some(&json!({ "schema": schema })))?;
        registered(&answer, subject)
    }

    fn latest(&self, subject: &str) -> Result<RegisteredSchema, RegistryError> {
        let path = format!("/subjects/{}/versions/latest", encode_segment(subject));
        registered(&self.call("GET", &path, None)?, subject)
    }

    fn schema_by_id(&self, id: i32) -> Result<String, RegistryError> {
        let answer = self.call("GET", &format!("/schemas/ids/{id}"), None)?;
        answer
            .get("schema")
            .and_then(Json::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                RegistryError::new(0, 50002, format!("unexpected registry answer: {answer}"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_normalised_for_the_local_table() {
        assert_eq!(
            normalize_url("HTTP://LocalHost:8081/"),
            "http://localhost:8081"
        );
        assert_eq!(normalize_url(" http://h:1/a/ "), "http://h:1/a");
        assert_eq!(encode_segment("t.a-value/x y"), "t.a-value%2Fx%20y");
    }

    /// An `https://` registry is reached over TLS: the first bytes on the wire are a TLS
    /// handshake record, and a peer that is no TLS server gives an "unreachable" error.
    #[test]
    fn https_urls_speak_tls() {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let peer = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut first = [0u8; 3];
            stream.read_exact(&mut first).unwrap();
            first
        });
        let registry = HttpRegistry::new(vec![format!("https://127.0.0.1:{port}")], None);
        let err = registry.schema_by_id(1).unwrap_err();
        // A TLS record header: handshake (22), protocol major version 3.
        assert_eq!(peer.join().unwrap()[..2], [22, 3]);
        assert_eq!(err.status, 0, "{err:?}");
        assert!(err.message.contains("unreachable"), "{err:?}");
    }
}
