//! Shared support for the Kafka listener's tests: an in-process server over a temporary log
//! and a blocking raw-protocol client; the real clients are in `clients.rs`.
#![allow(dead_code)]

pub mod clients;
pub use clients::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use headwater_kafka::codec::{decode_response, encode_request};
use headwater_kafka::sasl::SaslUsers;
use headwater_kafka::{KafkaServer, ServerConfig, TopicOwner};
use headwater_log::{Log, LogOptions};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};

/// A server on 127.0.0.1:0 over a log in `dir`, run by its own tokio runtime.
pub struct TestServer {
    pub addr: SocketAddr,
    pub log: Log,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestServer {
    pub fn start(dir: &Path, owner: Option<TopicOwner>) -> TestServer {
        let log = Log::open(dir, LogOptions::default()).expect("open log");
        Self::start_on(log, owner)
    }

    pub fn start_on(log: Log, owner: Option<TopicOwner>) -> TestServer {
        Self::start_with(log, owner, SaslUsers::default())
    }

    /// A server that requires SASL as one of `users`.
    pub fn start_with_sasl(dir: &Path, users: SaslUsers) -> TestServer {
        let log = Log::open(dir, LogOptions::default()).expect("open log");
        Self::start_with(log, None, users)
    }

    fn start_with(log: Log, owner: Option<TopicOwner>, users: SaslUsers) -> TestServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let server = KafkaServer::new(
            log.clone(),
            ServerConfig {
                cluster_id: "test-cluster".into(),
                initial_rebalance_delay: Duration::from_millis(300),
                ..ServerConfig::default()
            },
            owner,
        )
        .expect("server")
        .with_sasl(users);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(async move {
            server
                .serve(listener, async move {
                    let _ = rx.await;
                })
                .await
        });
        TestServer {
            addr,
            log,
            runtime: Some(runtime),
            stop: Some(tx),
        }
    }

    /// Stops the server and closes the log (as a worker shutdown does).
    pub fn stop(mut self) {
        self.shutdown();
        self.log.close().expect("close log");
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A blocking client speaking the protocol frame by frame.
pub struct RawClient {
    pub stream: TcpStream,
    correlation: i32,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        RawClient {
            stream,
            correlation: 0,
        }
    }

    /// Sends a request and returns the decoded response.
    pub fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Resp {
        self.correlation += 1;
        let frame = encode_request(key, version, self.correlation, "raw-test", request)
            .expect("encode request");
        self.stream.write_all(&frame).expect("send");
        let body = self.read_frame().expect("response frame");
        let (correlation, resp) =
            decode_response::<Resp>(key, version, body).expect("decode response");
        assert_eq!(correlation, self.correlation, "correlation id");
        resp
    }

    /// Sends a request without waiting for an answer.
    pub fn send<Req: Encodable>(&mut self, key: ApiKey, version: i16, request: &Req) {
        self.correlation += 1;
        let frame = encode_request(key, version, self.correlation, "raw-test", request)
            .expect("encode request");
        self.stream.write_all(&frame).expect("send");
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Reads one response frame (without its size); `None` when the server closed.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    /// Whether the server closed the connection (reads EOF within the timeout).
    pub fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.stream.read(&mut byte), Ok(0))
    }
}
