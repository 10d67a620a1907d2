//! The listener and the connection loop.
//!
//! Each connection reads size-prefixed frames and answers them one at a time, in order (as a
//! Kafka broker does: a client may pipeline, responses come back in request order). A
//! long-polling Fetch holds its connection's later requests, never other connections.
//! Invariants:
//! - a frame that is too large, too short or undecodable closes that connection only, with a
//!   warning naming the peer and the reason; nothing else is affected;
//! - a request for an API or version this server does not implement is answered with
//!   `UNSUPPORTED_VERSION` where the protocol allows (ApiVersions); for other APIs, which a
//!   client only sends after ignoring ApiVersions, the connection is closed with a warning
//!   naming the API, as Kafka does;
//! - a Produce with `acks=0` gets no response (Kafka's rule); everything else gets exactly one;
//! - with TLS set ([`KafkaServer::with_tls`]) every connection is TLS (Kafka's `SSL` listener),
//!   its handshake done in the connection's own task within [`TLS_HANDSHAKE_TIMEOUT`], so a
//!   slow or plain-text client holds up nobody else;
//! - with SASL users set ([`KafkaServer::with_sasl`]) a connection is served
//!   nothing but ApiVersions and the SASL exchange until it authenticates (see [`crate::sasl`]);
//! - the broker address given out in Metadata and FindCoordinator is
//!   [`ServerConfig::advertised`] when set, else the local address the client connected to.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use headwater_log::{Log, LogError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::api::{Broker, ConnInfo};
use crate::codec::{decode_request, encode_response, Body, Decoded, Request, MAX_REQUEST_BYTES};
use crate::sasl::{Exchange, Mechanism, SaslUsers, Step};
use kafka_protocol::messages::{ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// Settings of the Kafka listener.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Reported in Metadata and DescribeCluster (the worker's data-dir cluster id).
    pub cluster_id: String,
    /// This broker's node id (the leader of every partition).
    pub node_id: i32,
    /// Kafka's `group.initial.rebalance.delay.ms`.
    pub initial_rebalance_delay: Duration,
    /// Kafka's `auto.create.topics.enable`: Metadata requests that allow it create missing
    /// topics.
    pub auto_create_topics: bool,
    /// Kafka's `num.partitions`: partitions of auto-created topics and of CreateTopics
    /// requests that leave the count to the broker.
    pub default_partitions: u32,
    /// Topics that clients may read but never write or delete (besides `__consumer_offsets`).
    pub internal_topics: Vec<String>,
    /// Kafka's `offsets.retention.minutes`: how long a committed offset outlives both its
    /// commit and its group's last active member (see `Broker::expire_offsets`).
    pub offsets_retention: Duration,
    /// The broker address clients are told to use (Kafka's `advertised.listeners`):
    /// `None` gives each client the local address it connected to.
    pub advertised: Option<(String, u16)>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            cluster_id: "headwater".into(),
            node_id: 0,
            initial_rebalance_delay: Duration::from_millis(3000),
            auto_create_topics: true,
            default_partitions: 1,
            internal_topics: vec![
                "connect-configs".into(),
                "connect-offsets".into(),
                "connect-status".into(),
            ],
            offsets_retention: Duration::from_secs(7 * 24 * 60 * 60),
            advertised: None,
        }
    }
}

/// How often committed offsets are checked for expiry (Kafka's
/// `offsets.retention.check.interval.ms` is ten minutes; a minute keeps the noted activity of
/// groups finer).
const OFFSET_EXPIRY_INTERVAL: Duration = Duration::from_secs(60);

/// Tells which connector (if any) writes a topic; Produce and DeleteTopics refuse those.
pub type TopicOwner =
    Arc<dyn Fn(String) -> futures_util::future::BoxFuture<'static, Option<String>> + Send + Sync>;

/// How long a client may take to finish its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The Kafka protocol server over a [`Log`]. Cheap to clone.
#[derive(Clone)]
pub struct KafkaServer {
    broker: Arc<Broker>,
    tls: Option<TlsAcceptor>,
    sasl: Option<Arc<SaslUsers>>,
}

impl KafkaServer {
    /// Prepares the server: creates `__consumer_offsets` if needed and loads the committed
    /// offsets. `owner` tells which topics connectors write.
    pub fn new(
        log: Log,
        config: ServerConfig,
        owner: Option<TopicOwner>,
    ) -> Result<KafkaServer, LogError> {
        Ok(KafkaServer {
            broker: Arc::new(Broker::new(log, config, owner)?),
            tls: None,
            sasl: None,
        })
    }

    /// Requires SASL authentication as one of `users` on every connection (Kafka's
    /// `SASL_PLAINTEXT`, or `SASL_SSL` with [`KafkaServer::with_tls`]). No users: no SASL.
    pub fn with_sasl(mut self, users: SaslUsers) -> KafkaServer {
        self.sasl = (!users.is_empty()).then(|| Arc::new(users));
        self
    }

    /// Serves every connection over TLS with `acceptor` (Kafka's `SSL` security protocol;
    /// whether clients must present certificates is the acceptor's configuration).
    pub fn with_tls(mut self, acceptor: TlsAcceptor) -> KafkaServer {
        self.tls = Some(acceptor);
        self
    }

    /// Accepts connections on `listener` until `shutdown` resolves, then closes every
    /// connection (in-flight long polls are dropped) and returns.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let coordinator = self.broker.groups.clone();
        let ticker = tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_millis(100));
            loop {
                interval.tick().await;
                coordinator.tick();
            }
        });
        let broker = self.broker.clone();
        let offset_expiry = tokio::spawn(async move {
            let mut interval = tokio::time::interval(OFFSET_EXPIRY_INTERVAL);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                broker.expire_offsets(headwater_log::log::now_ms()).await;
            }
        });
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        let result = loop {
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let broker = self.broker.clone();
                        let tls = self.tls.clone();
                        let sasl = self.sasl.clone();
                        connections.spawn(async move { accepted_connection(broker, tls, sasl, stream, peer).await });
                    }
                    Err(err) => {
                        // Out of file descriptors and the like: keep serving the others.
                        tracing::warn!(error = %err, "Kafka listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        };
        ticker.abort();
        offset_expiry.abort();
        connections.shutdown().await;
        result
    }
}

/// Serves one accepted connection: over TLS after its handshake when `tls` is set.
async fn accepted_connection(
    broker: Arc<Broker>,
    tls: Option<TlsAcceptor>,
    sasl: Option<Arc<SaslUsers>>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let _ = stream.set_nodelay(true);
    let local = match stream.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    let info = match &broker.config.advertised {
        Some((host, port)) => ConnInfo {
            host: host.clone(),
            port: i32::from(*port),
            peer,
        },
        None => ConnInfo {
            host: local.ip().to_string(),
            port: i32::from(local.port()),
            peer,
        },
    };
    match tls {
        None => {
            let (rd, wr) = stream.into_split();
            connection(broker, rd, wr, info, false, sasl).await
        }
        Some(acceptor) => {
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let (rd, wr) = tokio::io::split(stream);
                    connection(broker, rd, wr, info, true, sasl).await
                }
                // At debug, as the REST listener's: probes and scanners fail handshakes all day.
                Ok(Err(err)) => tracing::debug!(
                    peer = %peer,
                    error = %err,
                    "Kafka listener: TLS handshake failed (is the client set to security.protocol=SSL and does it trust the certificate?)"
                ),
                Err(_) => tracing::debug!(peer = %peer, "Kafka listener: TLS handshake timed out"),
            }
        }
    }
}

async fn connection<R, W>(
    broker: Arc<Broker>,
    mut rd: R,
    mut wr: W,
    info: ConnInfo,
    tls: bool,
    sasl: Option<Arc<SaslUsers>>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let peer = info.peer;
    let mut sasl_state = match sasl {
        Some(_) => SaslState::Start,
        None => SaslState::Authenticated,
    };
    let auth_deadline = tokio::time::Instant::now() + SASL_AUTHENTICATION_TIMEOUT;
    loop {
        // Before SASL authentication a client gets small frames and a deadline (Kafka's
        // `sasl.server.max.receive.size`; CVE-2022-34917 was large unauthenticated frames).
        let authenticated = matches!(sasl_state, SaslState::Authenticated);
        let deadline = (!authenticated).then_some(auth_deadline);
        let mut size = [0u8; 4];
        match read_until(deadline, rd.read_exact(&mut size)).await {
            Some(Ok(_)) => {}
            Some(Err(_)) => return, // closed by the client
            None => {
                tracing::warn!(peer = %peer, "Kafka listener: no SASL authentication within {} s, closing the connection", SASL_AUTHENTICATION_TIMEOUT.as_secs());
                return;
            }
        }
        let len = i32::from_be_bytes(size);
        let limit = if authenticated {
            MAX_REQUEST_BYTES
        } else {
            UNAUTHENTICATED_MAX_REQUEST_BYTES
        };
        if len < 8 || len as usize > limit {
            let hint = if !tls && size[0] == 0x16 && size[1] == 0x03 {
                " (this looks like a TLS handshake: this listener is plain text; set kafka_tls_cert and kafka_tls_key for TLS, or use security.protocol=PLAINTEXT)"
            } else {
                ""
            };
            tracing::warn!(
                peer = %peer,
                size = len,
                "Kafka listener: malformed frame size, closing the connection{hint}"
            );
            return;
        }
        let mut frame = BytesMut::zeroed(len as usize);
        if !matches!(
            read_until(deadline, rd.read_exact(&mut frame)).await,
            Some(Ok(_))
        ) {
            return;
        }
        let decoded = match decode_request(frame.freeze()) {
            Ok(d) => d,
            Err(err) => {
                tracing::warn!(peer = %peer, error = %err, "Kafka listener: malformed request, closing the connection");
                return;
            }
        };
        if let Some(users) = &sasl {
            match sasl_step(&decoded, users, &mut sasl_state, peer) {
                SaslStep::Serve => {}
                SaslStep::Close => return,
                SaslStep::Answer { response, close } => {
                    let sent = match response {
                        Ok(bytes) => {
                            write_all_parts(&mut wr, vec![bytes]).await.is_ok()
                                && wr.flush().await.is_ok()
                        }
                        Err(err) => {
                            tracing::warn!(peer = %peer, error = %err, "Kafka listener: cannot encode a SASL response, closing the connection");
                            false
                        }
                    };
                    if close || !sent {
                        return;
                    }
                    continue;
                }
            }
        }
        let response: Option<Vec<Bytes>> = match &decoded.body {
            Body::UnknownApi => {
                tracing::warn!(
                    peer = %peer,
                    api_key = decoded.api_key,
                    "Kafka listener: unknown API key, closing the connection"
                );
                return;
            }
            Body::UnsupportedVersion(key) => match broker.unsupported(&decoded, *key) {
                Some(bytes) => Some(vec![bytes]),
                None => {
                    tracing::warn!(
                        peer = %peer,
                        api = ?key,
                        version = decoded.api_version,
                        "Kafka listener: API or version not supported by Headwater (not offered in ApiVersions), closing the connection"
                    );
                    return;
                }
            },
            Body::Request(_) => match broker.handle(decoded, &info).await {
                Ok(r) => r,
                Err(err) => {
                    tracing::warn!(peer = %peer, error = %err, "Kafka listener: cannot encode a response, closing the connection");
                    return;
                }
            },
        };
        if let Some(parts) = response {
            // TLS buffers what it encrypts: the flush sends it (a no-op on plain TCP).
            if write_all_parts(&mut wr, parts).await.is_err() || wr.flush().await.is_err() {
                return;
            }
        }
    }
}

/// The largest frame read before SASL authentication (Kafka's `sasl.server.max.receive.size`).
const UNAUTHENTICATED_MAX_REQUEST_BYTES: usize = 512 * 1024;
/// How long a connection may take to authenticate.
const SASL_AUTHENTICATION_TIMEOUT: Duration = Duration::from_secs(10);

/// `read`, given up at `deadline` when there is one (`None`: the deadline passed).
async fn read_until<T>(
    deadline: Option<tokio::time::Instant>,
    read: impl Future<Output = T>,
) -> Option<T> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, read).await.ok(),
        None => Some(read.await),
    }
}

/// Where a connection is in the SASL exchange.
#[derive(Debug)]
enum SaslState {
    Start,
    /// `SaslHandshake` chose a mechanism; `SaslAuthenticate` requests carry its messages.
    Exchanging(Exchange),
    Authenticated,
}

/// What to do with a request on a connection that needs SASL.
enum SaslStep {
    /// Serve it as usual.
    Serve,
    /// Send this answer, then close the connection when `close`.
    Answer {
        response: anyhow::Result<Bytes>,
        close: bool,
    },
    /// Close the connection without an answer.
    Close,
}

/// The SASL state machine of one connection (Kafka's `SaslServerAuthenticator`): ApiVersions
/// is served before authentication, then SaslHandshake v1 and SaslAuthenticate requests;
/// anything else before authentication closes the connection.
fn sasl_step(
    decoded: &Decoded,
    users: &SaslUsers,
    state: &mut SaslState,
    peer: SocketAddr,
) -> SaslStep {
    let (v, c) = (decoded.api_version, decoded.correlation_id);
    let request = match &decoded.body {
        Body::Request(r) => r.as_ref(),
        // Unknown APIs and versions close the connection in the usual path.
        _ => return SaslStep::Serve,
    };
    let close_with = |why: &str| {
        tracing::warn!(peer = %peer, api_key = decoded.api_key, "Kafka listener: {why}, closing the connection");
    };
    let illegal_state = |why: &str| {
        close_with(why);
        let response = if matches!(request, Request::SaslHandshake(_)) {
            let mut resp = SaslHandshakeResponse::default();
            resp.error_code = ResponseError::IllegalSaslState.code();
            encode_response(ApiKey::SaslHandshake, v, c, &resp)
        } else {
            let mut resp = SaslAuthenticateResponse::default();
            resp.error_code = ResponseError::IllegalSaslState.code();
            encode_response(ApiKey::SaslAuthenticate, v, c, &resp)
        };
        SaslStep::Answer {
            response,
            close: true,
        }
    };
    match (request, &mut *state) {
        (Request::SaslHandshake(_) | Request::SaslAuthenticate(_), SaslState::Authenticated) => {
            illegal_state("a SASL request after authentication")
        }
        (_, SaslState::Authenticated) | (Request::ApiVersions(_), _) => SaslStep::Serve,
        (Request::SaslHandshake(hs), SaslState::Start) => {
            let mut resp = SaslHandshakeResponse::default();
            resp.mechanisms = users
                .mechanisms()
                .iter()
                .map(|m| StrBytes::from_static_str(m.name()))
                .collect();
            let asked = hs.mechanism.as_str();
            let exchange = Mechanism::parse(asked).and_then(|m| users.start(m));
            let close = if v < 1 {
                // Version 0 sends the SASL messages outside Kafka's framing (clients before
                // Kafka 1.0); current clients use version 1 when ApiVersions offers it.
                close_with("SaslHandshake v0 (raw SASL tokens) is not supported; use a client from Kafka 1.0 or later");
                resp.error_code = ResponseError::UnsupportedVersion.code();
                true
            } else if let Some(exchange) = exchange {
                *state = SaslState::Exchanging(exchange);
                false
            } else {
                let offered: Vec<&str> = users.mechanisms().iter().map(|m| m.name()).collect();
                close_with(&format!(
                    "the client asked for SASL mechanism {asked:?}; this listener offers {}",
                    offered.join(", ")
                ));
                resp.error_code = ResponseError::UnsupportedSaslMechanism.code();
                true
            };
            SaslStep::Answer {
                response: encode_response(ApiKey::SaslHandshake, v, c, &resp),
                close,
            }
        }
        (Request::SaslAuthenticate(auth), SaslState::Exchanging(exchange)) => {
            let mechanism = exchange.mechanism();
            let mut resp = SaslAuthenticateResponse::default();
            let close = match exchange.step(users, &auth.auth_bytes) {
                Step::Continue(message) => {
                    resp.auth_bytes = Bytes::from(message);
                    false
                }
                Step::Done { user, last } => {
                    tracing::debug!(peer = %peer, user = %user, mechanism = mechanism.name(), "Kafka listener: SASL authenticated");
                    resp.auth_bytes = Bytes::from(last);
                    *state = SaslState::Authenticated;
                    false
                }
                Step::Failed(failure) => {
                    close_with(&format!(
                        "SASL {} authentication failed ({failure})",
                        mechanism.name()
                    ));
                    resp.error_code = ResponseError::SaslAuthenticationFailed.code();
                    resp.error_message = Some(StrBytes::from_string(match mechanism {
                        Mechanism::Plain => {
                            "Authentication failed: Invalid username or password".to_owned()
                        }
                        m => format!(
                            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
                            m.name()
                        ),
                    }));
                    true
                }
            };
            SaslStep::Answer {
                response: encode_response(ApiKey::SaslAuthenticate, v, c, &resp),
                close,
            }
        }
        (Request::SaslAuthenticate(_), _) => illegal_state("SaslAuthenticate before SaslHandshake"),
        (Request::SaslHandshake(_), _) => illegal_state("a second SaslHandshake"),
        _ => {
            close_with("a request before SASL authentication (is the client set to security.protocol=SASL_SSL or SASL_PLAINTEXT with a sasl.mechanism this listener offers?)");
            SaslStep::Close
        }
    }
}

/// Writes the pieces of a response back to back with vectored writes (a Fetch response's
/// record sets are pieces of their own, written from the bytes the log read).
async fn write_all_parts<W: AsyncWrite + Unpin>(
    wr: &mut W,
    mut parts: Vec<Bytes>,
) -> std::io::Result<()> {
    use bytes::Buf;
    parts.retain(|p| !p.is_empty());
    let mut first = 0;
    while first < parts.len() {
        let slices: Vec<std::io::IoSlice<'_>> = parts[first..]
            .iter()
            .take(64)
            .map(|p| std::io::IoSlice::new(p))
            .collect();
        let mut written = wr.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let len = parts[first].len();
            if written >= len {
                written -= len;
                first += 1;
            } else {
                parts[first].advance(written);
                written = 0;
            }
        }
    }
    Ok(())
}
