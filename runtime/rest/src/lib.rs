//! Headwater's Kafka Connect–compatible REST API.
//!
//! This crate owns the HTTP surface of a worker. It speaks Kafka Connect's REST
//! dialect so existing tooling (curl scripts, UIs, `connect-cli`s) keeps working:
//!
//! * `GET /` answers `{"version", "commit", "kafka_cluster_id"}` exactly like
//!   Kafka Connect's root resource.
//! * Every error, including the router's own 404 (unknown path) and 405 (known
//!   path, wrong method), is a JSON body `{"error_code": <status>, "message": …}`
//!   with `Content-Type: application/json`, the shape Kafka Connect's
//!   `ConnectExceptionMapper` produces. Handlers return [`RestError`] to keep it so.
//!
//! Invariants:
//! * [`router`] is the single place routes are registered; the 405 fallback is
//!   attached last because axum only applies it to routes registered before it.
//! * [`RestState`] is cheap to clone (an `Arc` inside) and is the one thing
//!   handlers receive; later features (connectors, tasks) grow it instead of
//!   adding new router state types.
//! * When [`RestAuth`] is configured, every request except `GET /health` must
//!   carry a matching `Authorization` header (see [`auth`]); otherwise 401 with
//!   the same JSON error body.
//! * `GET /health` answers Kafka Connect 3.9's `WorkerStatus`; `GET /metrics`
//!   answers the Prometheus text format (see `headwater_engine::metrics`).

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

pub mod auth;
pub mod connectors;
pub mod tls;
pub mod topics;

pub use auth::RestAuth;

/// What `GET /` reports about the worker. Field names and order match Kafka
/// Connect's `ServerInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Headwater's version (the worker crate's `CARGO_PKG_VERSION`).
    pub version: String,
    /// Short git commit the binary was built from, or `"unknown"`.
    pub commit: String,
    /// The Kafka cluster id this worker presents (stable per data dir).
    pub kafka_cluster_id: String,
}

/// Shared state handed to every REST handler.
///
/// Construct it with [`RestState::new`]; later features add fields (for example
/// a handle to the connector herder) together with builder-style setters, so
/// existing call sites keep compiling.
#[derive(Debug, Clone)]
pub struct RestState {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    info: ServerInfo,
    engine: Option<headwater_engine::Engine>,
    auth: RestAuth,
    /// Routes of other services on this listener (the embedded schema registry).
    extra_routes: Option<Router>,
    /// The worker's TLS listeners by name (`rest`, `kafka`), for the expiry metric.
    tls_listeners: Vec<(&'static str, tls::ServerTls)>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("info", &self.info)
            .field("engine", &self.engine.is_some())
            .field("auth", &self.auth)
            .field("extra_routes", &self.extra_routes.is_some())
            .field("tls_listeners", &self.tls_listeners.len())
            .finish()
    }
}

impl RestState {
    /// State for a worker described by `info`.
    pub fn new(info: ServerInfo) -> Self {
        Self {
            inner: Arc::new(Inner {
                info,
                engine: None,
                auth: RestAuth::default(),
                extra_routes: None,
                tls_listeners: Vec::new(),
            }),
        }
    }

    /// State for a worker whose connectors are run by `engine`.
    pub fn with_engine(info: ServerInfo, engine: headwater_engine::Engine) -> Self {
        Self {
            inner: Arc::new(Inner {
                info,
                engine: Some(engine),
                auth: RestAuth::default(),
                extra_routes: None,
                tls_listeners: Vec::new(),
            }),
        }
    }

    /// The same state with REST authentication `auth` (off when it is empty).
    pub fn with_auth(mut self, auth: RestAuth) -> Self {
        Arc::make_mut(&mut self.inner).auth = auth;
        self
    }

    /// The same state serving `routes` beside the Connect API on the same listener, behind the
    /// same authentication (the worker mounts its schema registry this way). Their paths must
    /// not overlap the Connect API's.
    pub fn with_routes(mut self, routes: Router) -> Self {
        Arc::make_mut(&mut self.inner).extra_routes = Some(routes);
        self
    }

    /// The same state reporting the certificates of `listeners` (name, TLS) in `/metrics`.
    pub fn with_tls_listeners(mut self, listeners: Vec<(&'static str, tls::ServerTls)>) -> Self {
        Arc::make_mut(&mut self.inner).tls_listeners = listeners;
        self
    }

    /// The configured REST authentication.
    pub fn auth(&self) -> &RestAuth {
        &self.inner.auth
    }

    /// The engine behind the connector endpoints (absent while the worker starts).
    pub fn engine(&self) -> Option<&headwater_engine::Engine> {
        self.inner.engine.as_ref()
    }

    /// The worker description served at `GET /`.
    pub fn info(&self) -> &ServerInfo {
        &self.inner.info
    }
}

/// Kafka Connect's JSON error body: `{"error_code": 404, "message": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The HTTP status code, repeated in the body (Kafka Connect does the same).
    pub error_code: u16,
    /// Human-readable description.
    pub message: String,
}

/// An error a handler returns; renders as [`ErrorBody`] with the same status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestError {
    status: StatusCode,
    message: String,
}

impl RestError {
    /// An error with an explicit status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// Jersey's wording for an unmatched path: `HTTP 404 Not Found`.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "HTTP 404 Not Found")
    }

    /// Jersey's wording for a known path with an unsupported method:
    /// `HTTP 405 Method Not Allowed`.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "HTTP 405 Method Not Allowed",
        )
    }

    /// The HTTP status this error renders with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message placed in the body.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for RestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.status.as_u16())
    }
}

impl std::error::Error for RestError {}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error_code: self.status.as_u16(),
            message: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

/// The complete REST API as an axum [`Router`].
///
/// Unknown paths answer 404 and known paths with a wrong method answer 405, both
/// with Kafka Connect's JSON error body (axum still adds the `Allow` header).
pub fn router(state: RestState) -> Router {
    let connect: Router<RestState> = Router::new()
        .route("/", get(server_info))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route(
            "/connectors",
            get(connectors::list).post(connectors::create),
        )
        .route(
            "/connectors/{name}",
            get(connectors::get_info).delete(connectors::delete),
        )
        .route(
            "/connectors/{name}/config",
            get(connectors::get_config)
                .put(connectors::put_config)
                .patch(connectors::patch_config),
        )
        .route("/connectors/{name}/status", get(connectors::status))
        .route("/connectors/{name}/restart", post(connectors::restart))
        .route("/connectors/{name}/pause", put(connectors::pause))
        .route("/connectors/{name}/resume", put(connectors::resume))
        .route("/connectors/{name}/stop", put(connectors::stop))
        .route("/connectors/{name}/tasks", get(connectors::tasks))
        .route(
            "/connectors/{name}/tasks/{task}/status",
            get(connectors::task_status),
        )
        .route(
            "/connectors/{name}/tasks/{task}/restart",
            post(connectors::task_restart),
        )
        .route(
            "/connectors/{name}/offsets",
            get(connectors::get_offsets)
                .patch(connectors::patch_offsets)
                .delete(connectors::delete_offsets),
        )
        .route("/connectors/{name}/topics", get(connectors::topics))
        .route(
            "/connectors/{name}/topics/reset",
            put(connectors::reset_topics),
        )
        .route("/connector-plugins", get(connectors::plugins))
        .route(
            "/connector-plugins/{plugin}/config",
            get(connectors::plugin_config),
        )
        .route(
            "/connector-plugins/{plugin}/config/validate",
            put(connectors::validate),
        )
        .route("/topics", get(topics::list))
        .route("/topics/{topic}", get(topics::describe))
        .route(
            "/topics/{topic}/partitions/{partition}/records",
            get(topics::records),
        );
    let mut all: Router = connect.with_state(state.clone());
    if let Some(extra) = &state.inner.extra_routes {
        all = all.merge(extra.clone());
    }
    // Must stay after every `.route(..)` and merge: axum applies the 405 fallback only to
    // method routers registered before this call.
    all.method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state, auth::require))
}

/// Serve [`router`] on `listener` (a `TcpListener`, or a [`tls::TlsListener`] for HTTPS) until `shutdown` completes, then stop
/// accepting connections and wait for in-flight requests to finish.
pub async fn serve<L, F>(listener: L, state: RestState, shutdown: F) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
    F: Future<Output = ()> + Send + 'static,
{
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn server_info(State(state): State<RestState>) -> Json<ServerInfo> {
    Json(state.info().clone())
}

/// `GET /health` (Kafka Connect 3.9+, KIP-1017): 200 `healthy` once the engine runs, 503
/// `starting` before.
async fn health(State(state): State<RestState>) -> Response {
    match state.engine() {
        Some(_) => (
            StatusCode::OK,
            Json(serde_json::json!({
                "status": "healthy",
                "message": "Worker has completed startup and is ready to handle requests."
            })),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({
                "status": "starting",
                "message": "Worker is still starting up."
            })),
        )
            .into_response(),
    }
}

/// `GET /metrics`: Prometheus text format 0.0.4.
async fn metrics(State(state): State<RestState>) -> Result<Response, RestError> {
    let engine = state.engine().ok_or_else(|| {
        RestError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The worker is still starting; try again shortly",
        )
    })?;
    let info = state.info();
    let mut text = format!(
        "# HELP headwater_build_info Headwater version and commit of this worker.\n# TYPE headwater_build_info gauge\nheadwater_build_info{{version=\"{}\",commit=\"{}\"}} 1\n",
        headwater_engine::metrics::escape_label(&info.version),
        headwater_engine::metrics::escape_label(&info.commit)
    );
    text.push_str(&engine.prometheus().await);
    let listeners = &state.inner.tls_listeners;
    if !listeners.is_empty() {
        text.push_str("# HELP headwater_tls_certificate_expiry_timestamp_seconds When the certificate a listener serves expires (Unix time; renewed files are picked up within 30 s).\n# TYPE headwater_tls_certificate_expiry_timestamp_seconds gauge\n");
        for (name, tls) in listeners {
            if let Some(at) = tls.expires_at() {
                text.push_str(&format!(
                    "headwater_tls_certificate_expiry_timestamp_seconds{{listener=\"{name}\"}} {at}\n"
                ));
            }
        }
    }
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

async fn not_found() -> RestError {
    RestError::not_found()
}

async fn method_not_allowed() -> RestError {
    RestError::method_not_allowed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{to_bytes, Body};
    use axum::http::{header, Method, Request};
    use serde_json::{json, Value};
    use tower::ServiceExt;

    fn state() -> RestState {
        RestState::new(ServerInfo {
            version: "1.2.3".into(),
            commit: "abcdef012345".into(),
            kafka_cluster_id: "q1Sh-9_ISia_zwGINzRvyQ".into(),
        })
    }

    async fn call(method: Method, uri: &str) -> (StatusCode, Option<String>, Value, Response) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .expect("valid request");
        let response = router(state()).oneshot(request).await.expect("infallible");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().expect("ascii content type").to_owned());
        let (parts, body) = response.into_parts();
        let bytes = to_bytes(body, 64 * 1024).await.expect("body");
        let value: Value = serde_json::from_slice(&bytes).expect("JSON body");
        (
            status,
            content_type,
            value,
            Response::from_parts(parts, Body::empty()),
        )
    }

    #[tokio::test]
    async fn root_reports_server_info() {
        let (status, content_type, body, _) = call(Method::GET, "/").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some("application/json"));
        assert_eq!(
            body,
            json!({
                "version": "1.2.3",
                "commit": "abcdef012345",
                "kafka_cluster_id": "q1Sh-9_ISia_zwGINzRvyQ",
            })
        );
        // Key order matches Kafka Connect's output.
        let keys: Vec<&str> = body
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["version", "commit", "kafka_cluster_id"]);
    }

    #[tokio::test]
    async fn unknown_path_is_kafka_connect_404() {
        for uri in ["/connectors-typo", "/a/b/c", "//"] {
            let (status, content_type, body, _) = call(Method::GET, uri).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
            assert_eq!(content_type.as_deref(), Some("application/json"));
            assert_eq!(
                body,
                json!({"error_code": 404, "message": "HTTP 404 Not Found"})
            );
        }
    }

    #[tokio::test]
    async fn wrong_method_is_kafka_connect_405() {
        for method in [Method::POST, Method::PUT, Method::DELETE] {
            let (status, content_type, body, response) = call(method.clone(), "/").await;
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
            assert_eq!(content_type.as_deref(), Some("application/json"));
            assert_eq!(
                body,
                json!({"error_code": 405, "message": "HTTP 405 Method Not Allowed"})
            );
            let allow = response
                .headers()
                .get(header::ALLOW)
                .expect("Allow header")
                .to_str()
                .expect("ascii");
            assert!(allow.contains("GET"), "Allow: {allow}");
        }
    }

    #[tokio::test]
    async fn health_reports_starting_without_an_engine() {
        let (status, _, body, _) = call(Method::GET, "/health").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["status"], "starting");
    }

    #[test]
    fn rest_error_renders_status_and_message() {
        let err = RestError::new(StatusCode::CONFLICT, "rebalance in progress");
        assert_eq!(err.status(), StatusCode::CONFLICT);
        assert_eq!(err.message(), "rebalance in progress");
        assert_eq!(err.to_string(), "rebalance in progress (409)");
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
    }

    #[tokio::test]
    async fn serve_stops_on_shutdown() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, state(), async {
            let _ = rx.await;
        }));
        tx.send(()).expect("server still running");
        let result = tokio::time::timeout(std::time::Duration::from_secs(10), server)
            .await
            .expect("server stops promptly")
            .expect("server task did not panic");
        assert!(result.is_ok(), "{result:?}");
    }
}
