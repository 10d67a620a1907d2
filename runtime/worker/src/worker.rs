//! `headwater worker`: start-up, serving, and graceful shutdown.
//!
//! Order of start-up (each step only after the previous one succeeded):
//! 1. open and lock the data dir, load or create the cluster id;
//! 2. install SIGINT/SIGTERM handlers (before anything can be asked to stop), and
//!    load the REST and Kafka listeners' certificates when TLS is set (a file that
//!    does not load is a usage error, exit 2);
//! 3. bind the REST listener;
//! 4. bind the Kafka protocol listener on `kafka_listen` (after the log and the
//!    engine are up) and log `Kafka protocol listener started`;
//! 5. log `Headwater worker started rest=http(s)://<bound addr> ...`;
//! 6. serve until the first SIGINT or SIGTERM.
//!
//! Nothing is logged at `info` before step 4, so a start-up failure prints only
//! its single `error:` line (at the default log level).
//!
//! Shutdown: stop accepting, let in-flight requests finish for up to
//! [`SHUTDOWN_GRACE`] (a second signal cuts this short), release the data dir
//! lock, log `Headwater worker stopped`, and return `Ok` (exit 0).

use std::time::Duration;

use headwater_engine::{Engine, EngineConfig, TargetState};
use headwater_log::{Log, LogOptions};
use headwater_rest::{RestState, ServerInfo};

use crate::connector_files::ConnectorFile;
use headwater_rest::tls::TlsListener;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing::{debug, info, warn};

use crate::datadir::DataDir;
use crate::failure::Failure;
use crate::settings::Settings;

/// How long in-flight requests may run after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The crate version reported by `GET /`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The build commit reported by `GET /` (`"unknown"` if not known at build time).
pub const COMMIT: &str = env!("HEADWATER_COMMIT");

/// Runs a worker with fully resolved `settings` until it is told to stop; `connectors` from
/// files on the command line are created (or updated) at start.
pub fn run(settings: Settings, connectors: Vec<ConnectorFile>) -> Result<(), Failure> {
    debug!(?settings, "resolved worker settings");
    let data_dir = DataDir::open(&settings.data_dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("headwater")
        .build()
        .map_err(|err| Failure::runtime(format!("cannot start the async runtime: {err}")))?;
    runtime.block_on(serve(&settings, &data_dir, connectors))?;
    drop(runtime);
    drop(data_dir);
    info!("Headwater worker stopped");
    Ok(())
}

async fn serve(
    settings: &Settings,
    data_dir: &DataDir,
    connectors: Vec<ConnectorFile>,
) -> Result<(), Failure> {
    let mut signals = Signals::install()?;
    // Read before anything binds: a certificate that does not load is a configuration error.
    let rest_tls = match &settings.rest_tls {
        Some(files) => {
            Some(headwater_rest::tls::ServerTls::load(files.clone()).map_err(Failure::usage)?)
        }
        None => None,
    };
    let rest_scheme = if rest_tls.is_some() { "https" } else { "http" };
    let kafka_tls = match &settings.kafka_tls {
        Some(files) => {
            Some(headwater_rest::tls::ServerTls::load(files.clone()).map_err(Failure::usage)?)
        }
        None => None,
    };

    let listener = TcpListener::bind(settings.rest_listen)
        .await
        .map_err(|err| {
            Failure::runtime(format!(
                "cannot bind the REST listener on {}: {err}",
                settings.rest_listen
            ))
        })?;
    let rest_addr = listener.local_addr().map_err(|err| {
        Failure::runtime(format!("cannot read the REST listener's address: {err}"))
    })?;

    let log_dir = data_dir.path().join("log");
    let log = Log::open(&log_dir, LogOptions::default()).map_err(|err| {
        Failure::runtime(format!(
            "cannot open the log in {}: {err}",
            log_dir.display()
        ))
    })?;
    // The schema registry comes up before any connector, so Avro converters find it.
    let registry = headwater_registry::Registry::open(log.clone())
        .map_err(|err| Failure::runtime(format!("cannot open the schema registry: {err}")))?;
    let registry_listener = match settings.schema_registry_listen {
        Some(addr) => Some(TcpListener::bind(addr).await.map_err(|err| {
            Failure::runtime(format!(
                "cannot bind the schema registry listener on {addr}: {err}"
            ))
        })?),
        None => None,
    };
    let mut registry_urls = local_urls(rest_scheme, rest_addr);
    if let Some(l) = &registry_listener {
        let addr = l.local_addr().map_err(|err| {
            Failure::runtime(format!("cannot read the schema registry's address: {err}"))
        })?;
        registry_urls.extend(local_urls(rest_scheme, addr));
    }
    let registry_handle: std::sync::Arc<dyn headwater_format::avro::registry::SchemaRegistry> =
        std::sync::Arc::new(registry.clone());
    headwater_format::avro::registry::register_local(&registry_urls, registry_handle.clone());
    let engine = Engine::start(
        log.clone(),
        crate::plugins::registry(),
        EngineConfig {
            worker_id: rest_addr.to_string(),
            ..EngineConfig::default()
        },
    )
    .await
    .map_err(|err| Failure::runtime(format!("cannot start the connector engine: {err}")))?;
    for file in connectors {
        let exists = engine.connector_names().await.contains(&file.name);
        let result = if exists {
            engine
                .put_connector_config(&file.name, file.config)
                .await
                .map(|_| ())
        } else {
            engine
                .create_connector(&file.name, file.config, TargetState::Started)
                .await
                .map(|_| ())
        };
        if let Err(err) = result {
            engine.shutdown().await;
            let _ = log.close();
            return Err(Failure::usage(format!(
                "connector {} from the command line: {}",
                file.name,
                err.to_string().replace('\n', " ")
            )));
        }
    }

    // Logged only now so that a failed start-up prints nothing but its error.
    if data_dir.created_cluster_id() {
        info!(
            kafka_cluster_id = %data_dir.cluster_id(),
            "generated a new Kafka cluster id for this data dir"
        );
    }
    let kafka_listener = match TcpListener::bind(settings.kafka_listen).await {
        Ok(listener) => listener,
        Err(err) => {
            engine.shutdown().await;
            let _ = log.close();
            return Err(Failure::runtime(format!(
                "cannot bind the Kafka listener on {}: {err}",
                settings.kafka_listen
            )));
        }
    };
    let kafka_addr = kafka_listener.local_addr().map_err(|err| {
        Failure::runtime(format!("cannot read the Kafka listener's address: {err}"))
    })?;
    let owner_engine = engine.clone();
    let topic_owner: headwater_kafka::TopicOwner = std::sync::Arc::new(move |topic: String| {
        let engine = owner_engine.clone();
        Box::pin(async move {
            for name in engine.connector_names().await {
                if let Ok(topics) = engine.active_topics(&name).await {
                    if topics.contains(&topic) {
                        return Some(name);
                    }
                }
            }
            None
        })
    });
    let kafka = headwater_kafka::KafkaServer::new(
        log.clone(),
        headwater_kafka::ServerConfig {
            cluster_id: data_dir.cluster_id().to_owned(),
            advertised: settings.kafka_advertised.clone(),
            ..headwater_kafka::ServerConfig::default()
        },
        Some(topic_owner),
    )
    .map_err(|err| Failure::runtime(format!("cannot start the Kafka listener: {err}")))?;
    let kafka = match &kafka_tls {
        Some(tls) => kafka.with_tls(tls.acceptor()),
        None => kafka,
    }
    .with_sasl(settings.kafka_sasl.users());
    let sasl = settings.kafka_sasl.enabled();
    if sasl && kafka_tls.is_none() {
        let plain = settings
            .kafka_sasl
            .mechanisms
            .contains(&headwater_kafka::sasl::Mechanism::Plain);
        if plain {
            warn!("the Kafka listener takes SASL/PLAIN passwords without TLS (SASL_PLAINTEXT): they cross the network in clear text; set kafka_tls_cert and kafka_tls_key");
        } else {
            warn!("the Kafka listener uses SASL without TLS (SASL_PLAINTEXT): SCRAM keeps passwords off the wire, but records travel in clear text and an authenticated connection can be taken over; set kafka_tls_cert and kafka_tls_key");
        }
    }
    let (kafka_stop_tx, kafka_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let kafka_task = tokio::spawn(async move {
        kafka
            .serve(kafka_listener, async move {
                let _ = kafka_stop_rx.await;
            })
            .await
    });
    info!(
        kafka = %kafka_addr,
        security_protocol = match (kafka_tls.is_some(), sasl) {
            (true, true) => "SASL_SSL",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (false, false) => "PLAINTEXT",
        },
        client_certificates = kafka_tls.as_ref().is_some_and(|t| t.requires_client_certificates()),
        sasl_mechanisms = %if sasl {
            settings
                .kafka_sasl
                .mechanisms
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(",")
        } else {
            "none".to_owned()
        },
        advertised = %settings
            .kafka_advertised
            .as_ref()
            .map_or_else(|| "the address each client connects to".to_owned(), |(h, p)| format!("{h}:{p}")),
        "Kafka protocol listener started"
    );

    let state = RestState::with_engine(
        ServerInfo {
            version: VERSION.to_owned(),
            commit: COMMIT.to_owned(),
            kafka_cluster_id: data_dir.cluster_id().to_owned(),
        },
        engine.clone(),
    )
    .with_auth(settings.rest_auth.clone())
    .with_tls_listeners(
        [("rest", rest_tls.clone()), ("kafka", kafka_tls.clone())]
            .into_iter()
            .filter_map(|(name, tls)| tls.map(|t| (name, t)))
            .collect(),
    )
    .with_routes(headwater_registry::http::router(registry.clone()));
    let registry_task = registry_listener.map(|listener| {
        let routes = headwater_registry::http::router(registry.clone());
        let auth_state = state.clone();
        let tls = rest_tls.clone();
        tokio::spawn(async move {
            let app = routes.layer(axum::middleware::from_fn_with_state(
                auth_state,
                headwater_rest::auth::require,
            ));
            let served = match tls {
                Some(tls) => match TlsListener::new(listener, &tls, "schema registry") {
                    Ok(listener) => axum::serve(listener, app).await,
                    Err(err) => Err(err),
                },
                None => axum::serve(listener, app).await,
            };
            if let Err(err) = served {
                warn!(error = %err, "the schema registry listener failed");
            }
        })
    });
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stopped = async move {
        let _ = stop_rx.await;
    };
    let mut server = match &rest_tls {
        Some(tls) => {
            let listener = TlsListener::new(listener, tls, "REST").map_err(|err| {
                Failure::runtime(format!("cannot start the REST listener: {err}"))
            })?;
            tokio::spawn(headwater_rest::serve(listener, state, stopped))
        }
        None => tokio::spawn(headwater_rest::serve(listener, state, stopped)),
    };

    info!(
        rest = %format_args!("{rest_scheme}://{rest_addr}"),
        kafka = %kafka_addr,
        data_dir = %data_dir.path().display(),
        kafka_cluster_id = %data_dir.cluster_id(),
        version = %VERSION,
        commit = %COMMIT,
        "Headwater worker started"
    );

    tokio::select! {
        name = signals.recv() => {
            info!(signal = %name, "shutting down: no longer accepting connections");
        }
        outcome = &mut server => {
            return Err(Failure::runtime(match outcome {
                Ok(Ok(())) => "the REST server stopped unexpectedly".to_owned(),
                Ok(Err(err)) => format!("the REST server failed: {err}"),
                Err(err) => format!("the REST server crashed: {err}"),
            }));
        }
    }
    let _ = stop_tx.send(());
    let _ = kafka_stop_tx.send(());
    let _ = kafka_task.await;

    tokio::select! {
        outcome = tokio::time::timeout(SHUTDOWN_GRACE, &mut server) => match outcome {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(err))) => {
                return Err(Failure::runtime(format!("the REST server failed while stopping: {err}")));
            }
            Ok(Err(err)) => {
                return Err(Failure::runtime(format!("the REST server crashed while stopping: {err}")));
            }
            Err(_) => warn!(
                grace_secs = SHUTDOWN_GRACE.as_secs(),
                "in-flight requests did not finish in time; closing their connections"
            ),
        },
        name = signals.recv() => {
            warn!(signal = %name, "second signal: closing open connections now");
        }
    }
    server.abort();
    if let Some(task) = registry_task {
        task.abort();
    }
    engine.shutdown().await;
    headwater_format::avro::registry::unregister_local(&registry_handle);
    log.close()
        .map_err(|err| Failure::runtime(format!("closing the log failed: {err}")))?;
    Ok(())
}

/// The URLs by which converters in this process may name a listener of the worker: its
/// address, and for a loopback or wildcard address also `localhost` and `127.0.0.1`.
fn local_urls(scheme: &str, addr: std::net::SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut urls = vec![format!("{scheme}://{addr}")];
    if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        urls.push(format!("{scheme}://localhost:{port}"));
        urls.push(format!("{scheme}://127.0.0.1:{port}"));
    }
    urls
}

/// SIGINT and SIGTERM, whichever comes first.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn install() -> Result<Self, Failure> {
        let install = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|err| {
                Failure::runtime(format!("cannot install the {name} handler: {err}"))
            })
        };
        Ok(Self {
            interrupt: install(SignalKind::interrupt(), "SIGINT")?,
            terminate: install(SignalKind::terminate(), "SIGTERM")?,
        })
    }

    /// Waits for the next signal and returns its name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}
