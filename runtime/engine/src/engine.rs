//! The engine ("herder" in Kafka Connect): the connectors of one worker, their lifecycle and
//! the operations behind the REST API.
//!
//! Invariants:
//! - every change of a connector's config or target state is durable in the config topic
//!   before the call returns, so a restarted worker brings each connector back as it was;
//! - one connector's failure never touches another: each task runs in its own tokio task and
//!   reports only its own status;
//! - operations on one connector are serialised by the engine lock; tasks are stopped (and
//!   awaited) outside of it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headwater_api::config::{
    ConfigDef, ConfigKey, ConfigType, ConfigValidation, Importance, Validator,
};
use headwater_api::{OffsetMap, Properties, SourceTask};
use headwater_log::batch::Compression;
use headwater_log::{Log, TopicConfig};
use tokio::task::JoinHandle;

use crate::convert::Converters;
use crate::error::EngineError;
use crate::metrics;
use crate::model::{
    ConnectorInfo, ConnectorStateInfo, PluginInfo, State, StateEntry, TargetState, TaskId,
    TaskInfo, TaskState,
};
use crate::plugins::{AnyConnector, Plugins, SinkPlugin};
use crate::providers::{self, Resolved};
use crate::runner::{supervise, Control, TaskSetup, TaskShared, TopicDefaults};
use crate::stores::{InternalTopics, OffsetsByConnector};

/// Worker-wide engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// `worker_id` shown in statuses (Kafka Connect uses `host:port` of the REST listener).
    pub worker_id: String,
    /// Batch compression for topics whose `compression.type` is `producer`.
    pub default_compression: Compression,
    pub task_backoff_initial: Duration,
    pub task_backoff_max: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            worker_id: "127.0.0.1:8083".into(),
            default_compression: Compression::Lz4,
            task_backoff_initial: Duration::from_millis(500),
            task_backoff_max: Duration::from_secs(60),
        }
    }
}

struct RunningTask {
    config: Properties,
    shared: Arc<TaskShared>,
    handle: Option<JoinHandle<()>>,
}

struct Connector {
    config: Properties,
    target: TargetState,
    state: (State, Option<String>),
    tasks: Vec<RunningTask>,
    active_topics: Arc<Mutex<BTreeSet<String>>>,
    /// `source` or `sink` (from the class; `source` when the class is unknown).
    kind: &'static str,
}

impl Connector {
    /// A connector not started yet.
    fn new(config: Properties, target: TargetState) -> Self {
        Connector {
            config,
            target,
            state: (State::Unassigned, None),
            tasks: Vec::new(),
            active_topics: Arc::new(Mutex::new(BTreeSet::new())),
            kind: "source",
        }
    }
}

struct Inner {
    log: Log,
    topics: InternalTopics,
    plugins: Plugins,
    config: EngineConfig,
    connectors: tokio::sync::Mutex<BTreeMap<String, Connector>>,
    offsets: Arc<Mutex<OffsetsByConnector>>,
}

/// A handle to the engine; cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// Kafka Connect's framework keys every connector accepts, with their defaults.
pub fn framework_config_def() -> ConfigDef {
    ConfigDef::new()
        .define(
            ConfigKey::new("name", ConfigType::String)
                .importance(Importance::High)
                .validator(Validator::NonEmptyString)
                .group("Common", 1)
                .doc("Globally unique name to use for this connector."),
        )
        .define(
            ConfigKey::new("connector.class", ConfigType::String)
                .importance(Importance::High)
                .group("Common", 2)
                .doc("Name or alias of the class for this connector."),
        )
        .define(
            ConfigKey::new("tasks.max", ConfigType::Int)
                .default_str("1")
                .validator(Validator::at_least(1.0))
                .importance(Importance::High)
                .group("Common", 3)
                .doc("Maximum number of tasks to use for this connector."),
        )
        .define(
            ConfigKey::new("errors.tolerance", ConfigType::String)
                .default_str("none")
                .validator(Validator::one_of_case_insensitive(&["none", "all"]))
                .importance(Importance::Medium)
                .group("Error Handling", 1)
                .doc("Behavior for tolerating errors during connector operation: 'none' fails the task, 'all' skips problematic records."),
        )
        .define(
            ConfigKey::new("errors.log.enable", ConfigType::Boolean)
                .default_str("false")
                .importance(Importance::Medium)
                .group("Error Handling", 2)
                .doc("Log each tolerated error."),
        )
        .define(
            ConfigKey::new("errors.log.include.messages", ConfigType::Boolean)
                .default_str("false")
                .importance(Importance::Low)
                .group("Error Handling", 3)
                .doc("Include the failed record (topic, source partition and offset, key and value) in each tolerated-error log line."),
        )
        .define(
            ConfigKey::new("topic.creation.default.partitions", ConfigType::Int)
                .default_str("1")
                .validator(Validator::at_least(1.0))
                .importance(Importance::Low)
                .group("Topic Creation", 1)
                .doc("Partitions of topics this connector creates."),
        )
        .define(
            ConfigKey::new("topic.creation.default.replication.factor", ConfigType::Int)
                .default_str("-1")
                .importance(Importance::Low)
                .group("Topic Creation", 2)
                .doc("Accepted for compatibility; a single Headwater node keeps one copy."),
        )
        .define(
            ConfigKey::new("topic.creation.default.cleanup.policy", ConfigType::String)
                .default_str("delete")
                .validator(Validator::one_of(&["delete", "compact", "compact,delete", "delete,compact"]))
                .importance(Importance::Low)
                .group("Topic Creation", 3)
                .doc("cleanup.policy of topics this connector creates."),
        )
}

impl Engine {
    /// Opens the internal topics, loads configs and offsets, and starts every connector in
    /// its stored target state.
    pub async fn start(
        log: Log,
        plugins: Plugins,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        let topics = InternalTopics::open(log.clone())?;
        let stored = topics.load_connectors()?;
        let offsets = topics.load_offsets()?;
        let engine = Engine {
            inner: Arc::new(Inner {
                log,
                topics,
                plugins,
                config,
                connectors: tokio::sync::Mutex::new(BTreeMap::new()),
                offsets: Arc::new(Mutex::new(offsets)),
            }),
        };
        let mut connectors = engine.inner.connectors.lock().await;
        for (name, stored) in stored {
            let mut c = Connector::new(stored.config, stored.target);
            engine.start_connector(&name, &mut c);
            tracing::info!(connector = %name, target = c.target.name(), "restored connector");
            connectors.insert(name, c);
        }
        drop(connectors);
        Ok(engine)
    }

    pub fn log(&self) -> &Log {
        &self.inner.log
    }

    pub fn plugins(&self) -> &Plugins {
        &self.inner.plugins
    }

    /// Validates a full connector configuration: framework keys, the connector's own keys and
    /// cross-checks, converters and the transform chain, with config-provider placeholders
    /// resolved (an unresolvable one is an error on its key). `Err` when `connector.class` is
    /// missing or unknown (nothing else can be checked then).
    pub fn validate(&self, props: &Properties) -> Result<ValidationReport, EngineError> {
        let resolved = providers::resolve(props);
        let mut validation = self.validate_resolved(&resolved.props)?;
        for (key, message) in &resolved.errors {
            validation.add_error(key, message.clone());
        }
        Ok(ValidationReport {
            validation,
            resolved,
        })
    }

    fn validate_resolved(&self, props: &Properties) -> Result<ConfigValidation, EngineError> {
        let class = props.get("connector.class").ok_or_else(|| {
            EngineError::BadRequest(
                "Connector config contains no connector type: set \"connector.class\"".into(),
            )
        })?;
        let plugin = self
            .inner
            .plugins
            .find_any(class)
            .map_err(EngineError::BadRequest)?;
        let mut validation = framework_config_def().validate(props);
        validation.extend(plugin.validate(props));
        if let AnyConnector::Sink(_) = plugin {
            validation.extend(validate_sink_subscription(props));
        }
        validation.extend(Converters::validate(props));
        validation.extend(self.inner.plugins.transforms().validate(props));
        Ok(validation)
    }

    fn check_valid(&self, name: &str, props: &Properties) -> Result<(), EngineError> {
        if name.is_empty() || name.contains('/') {
            return Err(EngineError::BadRequest(format!(
                "Connector name {name:?} is invalid: it must be non-empty and must not contain '/'"
            )));
        }
        let validation = self.validate(props)?;
        if validation.error_count() > 0 {
            return Err(EngineError::BadRequest(validation.error_message()));
        }
        Ok(())
    }

    /// Names of all connectors, sorted.
    pub async fn connector_names(&self) -> Vec<String> {
        self.inner.connectors.lock().await.keys().cloned().collect()
    }

    /// Creates a connector (409 if it exists).
    pub async fn create_connector(
        &self,
        name: &str,
        mut config: Properties,
        initial: TargetState,
    ) -> Result<ConnectorInfo, EngineError> {
        config.insert("name".into(), name.to_owned());
        self.check_valid(name, &config)?;
        let mut connectors = self.inner.connectors.lock().await;
        if connectors.contains_key(name) {
            return Err(EngineError::AlreadyExists(format!(
                "Connector {name} already exists"
            )));
        }
        self.inner.topics.put_connector(name, &config).await?;
        self.inner.topics.put_target_state(name, initial).await?;
        let mut c = Connector::new(config, initial);
        self.start_connector(name, &mut c);
        let info = info_of(name, &c);
        connectors.insert(name.to_owned(), c);
        tracing::info!(connector = %name, "created connector");
        Ok(info)
    }

    /// Replaces a connector's configuration (creating it if missing); returns whether it was
    /// created.
    pub async fn put_connector_config(
        &self,
        name: &str,
        mut config: Properties,
    ) -> Result<(bool, ConnectorInfo), EngineError> {
        if let Some(given) = config.get("name") {
            if given != name {
                return Err(EngineError::BadRequest(format!(
                    "Connector name configuration ({given}) doesn't match connector name in the URL ({name})"
                )));
            }
        }
        config.insert("name".into(), name.to_owned());
        self.check_valid(name, &config)?;
        let mut connectors = self.inner.connectors.lock().await;
        let created = !connectors.contains_key(name);
        if let Some(existing) = connectors.get(name) {
            // The same configuration again (a connector file re-applied at start, an idempotent
            // PUT): nothing changes, so the running tasks are left alone.
            if existing.config == config {
                return Ok((false, info_of(name, existing)));
            }
        }
        self.inner.topics.put_connector(name, &config).await?;
        if created {
            self.inner
                .topics
                .put_target_state(name, TargetState::Started)
                .await?;
            let mut c = Connector::new(config, TargetState::Started);
            self.start_connector(name, &mut c);
            let info = info_of(name, &c);
            connectors.insert(name.to_owned(), c);
            return Ok((true, info));
        }
        let c = connectors.get_mut(name).ok_or_else(|| not_found(name))?;
        let handles = take_tasks(c);
        c.config = config;
        drop(connectors);
        join_all(handles).await;
        let mut connectors = self.lock_with_tasks_stopped(name).await?;
        let c = connectors.get_mut(name).ok_or_else(|| not_found(name))?;
        self.start_connector(name, c);
        Ok((false, info_of(name, c)))
    }

    /// Locks the connectors once `name` has no running tasks. A call that stopped a
    /// connector's tasks waits for them with the lock released; another call (a config
    /// update, a restart, a resume) may start tasks meanwhile. Those are stopped too, so that
    /// the caller starts the only set: starting over them would leave them running unseen.
    async fn lock_with_tasks_stopped(
        &self,
        name: &str,
    ) -> Result<tokio::sync::MutexGuard<'_, BTreeMap<String, Connector>>, EngineError> {
        loop {
            let mut connectors = self.inner.connectors.lock().await;
            let c = connectors.get_mut(name).ok_or_else(|| not_found(name))?;
            if c.tasks.is_empty() {
                return Ok(connectors);
            }
            let handles = take_tasks(c);
            drop(connectors);
            join_all(handles).await;
        }
    }

    /// Applies a partial update: `None` removes a key.
    pub async fn patch_connector_config(
        &self,
        name: &str,
        patch: BTreeMap<String, Option<String>>,
    ) -> Result<ConnectorInfo, EngineError> {
        let mut config = self.connector_config(name).await?;
        for (k, v) in patch {
            match v {
                Some(v) => config.insert(k, v),
                None => config.remove(&k),
            };
        }
        Ok(self.put_connector_config(name, config).await?.1)
    }

    pub async fn connector_config(&self, name: &str) -> Result<Properties, EngineError> {
        let connectors = self.inner.connectors.lock().await;
        Ok(connectors
            .get(name)
            .ok_or_else(|| not_found(name))?
            .config
            .clone())
    }

    pub async fn connector_info(&self, name: &str) -> Result<ConnectorInfo, EngineError> {
        let connectors = self.inner.connectors.lock().await;
        Ok(info_of(
            name,
            connectors.get(name).ok_or_else(|| not_found(name))?,
        ))
    }

    pub async fn tasks(&self, name: &str) -> Result<Vec<TaskInfo>, EngineError> {
        let connectors = self.inner.connectors.lock().await;
        let c = connectors.get(name).ok_or_else(|| not_found(name))?;
        Ok(c.tasks
            .iter()
            .enumerate()
            .map(|(i, t)| TaskInfo {
                id: TaskId {
                    connector: name.to_owned(),
                    task: i as u32,
                },
                config: t.config.clone(),
            })
            .collect())
    }

    pub async fn status(&self, name: &str) -> Result<ConnectorStateInfo, EngineError> {
        let connectors = self.inner.connectors.lock().await;
        let c = connectors.get(name).ok_or_else(|| {
            EngineError::NotFound(format!("No status found for connector {name}"))
        })?;
        Ok(self.status_of(name, c))
    }

    pub async fn task_status(&self, name: &str, task: u32) -> Result<TaskState, EngineError> {
        let status = self.status(name).await?;
        status
            .tasks
            .into_iter()
            .find(|t| t.id == task)
            .ok_or_else(|| EngineError::NotFound(format!("No status found for task {name}-{task}")))
    }

    fn status_of(&self, name: &str, c: &Connector) -> ConnectorStateInfo {
        let worker_id = self.inner.config.worker_id.clone();
        let (state, trace) = match c.target {
            TargetState::Stopped => (State::Stopped, None),
            TargetState::Paused if c.state.0 != State::Failed => (State::Paused, None),
            _ => c.state.clone(),
        };
        ConnectorStateInfo {
            name: name.to_owned(),
            connector: StateEntry {
                state,
                worker_id: worker_id.clone(),
                trace,
            },
            tasks: c
                .tasks
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let (state, trace) = t.shared.status();
                    let s = t.shared.snapshot.status();
                    TaskState {
                        id: i as u32,
                        state,
                        worker_id: worker_id.clone(),
                        trace,
                        snapshot: s.started.then_some(crate::model::SnapshotState {
                            running: s.running,
                            rows: s.rows,
                            rows_estimated: s.rows_estimated,
                            tables: s.tables,
                            tables_done: s.tables_done,
                        }),
                        waiting: t
                            .shared
                            .waiting
                            .status()
                            .map(|w| crate::model::WaitingState {
                                reason: w.reason,
                                since_ms: w.since_ms,
                            }),
                    }
                })
                .collect(),
            connector_type: c.kind.into(),
        }
    }

    /// Sets the target state (pause, resume, stop).
    pub async fn set_target(&self, name: &str, target: TargetState) -> Result<(), EngineError> {
        let mut connectors = self.inner.connectors.lock().await;
        let c = connectors
            .get_mut(name)
            .ok_or_else(|| EngineError::NotFound(format!("Unknown connector {name}")))?;
        self.inner.topics.put_target_state(name, target).await?;
        let previous = c.target;
        c.target = target;
        match target {
            TargetState::Paused => {
                for t in &c.tasks {
                    t.shared.control.send_replace(Control::Pause);
                }
            }
            TargetState::Stopped => {
                let handles = take_tasks(c);
                drop(connectors);
                join_all(handles).await;
            }
            TargetState::Started => {
                if previous == TargetState::Stopped || c.tasks.is_empty() {
                    self.start_connector(name, c);
                } else {
                    for t in &c.tasks {
                        t.shared.control.send_replace(Control::Run);
                    }
                }
            }
        }
        Ok(())
    }

    /// Restarts a connector and, per Kafka Connect's flags, its (failed) tasks. Returns the
    /// status with the restarted instances shown as RESTARTING when tasks are included.
    pub async fn restart(
        &self,
        name: &str,
        include_tasks: bool,
        only_failed: bool,
    ) -> Result<Option<ConnectorStateInfo>, EngineError> {
        let mut connectors = self.inner.connectors.lock().await;
        let c = connectors
            .get_mut(name)
            .ok_or_else(|| EngineError::NotFound(format!("Unknown connector {name}")))?;
        if !include_tasks {
            // Restarting the connector instance alone: re-validate and recompute task configs.
            if !only_failed || c.state.0 == State::Failed {
                c.state = (State::Running, None);
            }
            return Ok(None);
        }
        let mut status = self.status_of(name, c);
        let restart: Vec<usize> = c
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| !only_failed || t.shared.status().0 == State::Failed)
            .map(|(i, _)| i)
            .collect();
        if !only_failed || status.connector.state == State::Failed {
            status.connector.state = State::Restarting;
        }
        for t in &mut status.tasks {
            if restart.contains(&(t.id as usize)) {
                t.state = State::Restarting;
                t.trace = None;
            }
        }
        if restart.len() == c.tasks.len() && !c.tasks.is_empty() || c.tasks.is_empty() {
            let handles = take_tasks(c);
            drop(connectors);
            join_all(handles).await;
            // The connector may have been deleted meanwhile: then there is nothing to start.
            if let Ok(mut connectors) = self.lock_with_tasks_stopped(name).await {
                if let Some(c) = connectors.get_mut(name) {
                    if c.target != TargetState::Stopped {
                        self.start_connector(name, c);
                    }
                }
            }
        } else {
            for i in restart {
                self.restart_task_locked(name, c, i);
            }
        }
        Ok(Some(status))
    }

    /// Restarts one task.
    pub async fn restart_task(&self, name: &str, task: u32) -> Result<(), EngineError> {
        let mut connectors = self.inner.connectors.lock().await;
        let c = connectors
            .get_mut(name)
            .ok_or_else(|| EngineError::NotFound(format!("Unknown connector {name}")))?;
        if task as usize >= c.tasks.len() {
            return Err(EngineError::NotFound(format!(
                "Task {name}-{task} not found"
            )));
        }
        self.restart_task_locked(name, c, task as usize);
        Ok(())
    }

    fn restart_task_locked(&self, name: &str, c: &mut Connector, index: usize) {
        let old = &mut c.tasks[index];
        old.shared.control.send_replace(Control::Stop);
        let old_handle = old.handle.take();
        let config = old.config.clone();
        let shared = TaskShared::new(control_for(c.target));
        let handle = if c.kind == "sink" {
            let count = c.tasks.len() as u32;
            let setup = self.sink_setup(name, c, index as u32, count, &config, shared.clone());
            tokio::spawn(async move {
                if let Some(h) = old_handle {
                    let _ = h.await;
                }
                if let Some(setup) = setup {
                    crate::sink_runner::supervise_sink(setup).await;
                }
            })
        } else {
            let setup = self.task_setup(name, c, index as u32, config.clone(), shared.clone());
            tokio::spawn(async move {
                if let Some(h) = old_handle {
                    let _ = h.await;
                }
                if let Some(setup) = setup {
                    supervise(setup).await;
                }
            })
        };
        c.tasks[index] = RunningTask {
            config,
            shared,
            handle: Some(handle),
        };
    }

    /// Deletes a connector: stops its tasks and removes its config (offsets are kept, as in
    /// Kafka Connect).
    pub async fn delete_connector(&self, name: &str) -> Result<(), EngineError> {
        let mut connectors = self.inner.connectors.lock().await;
        let mut c = connectors.remove(name).ok_or_else(|| not_found(name))?;
        self.inner.topics.delete_connector(name).await?;
        let handles = take_tasks(&mut c);
        drop(connectors);
        join_all(handles).await;
        tracing::info!(connector = %name, "deleted connector");
        Ok(())
    }

    /// The connector's committed source offsets.
    pub async fn offsets(&self, name: &str) -> Result<Vec<(OffsetMap, OffsetMap)>, EngineError> {
        if !self.inner.connectors.lock().await.contains_key(name) {
            return Err(not_found(name));
        }
        Ok(self
            .inner
            .offsets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .unwrap_or_default())
    }

    /// Alters (or with `None`, resets) offsets of a STOPPED connector.
    pub async fn alter_offsets(
        &self,
        name: &str,
        entries: Vec<(OffsetMap, Option<OffsetMap>)>,
    ) -> Result<(), EngineError> {
        {
            let connectors = self.inner.connectors.lock().await;
            let c = connectors.get(name).ok_or_else(|| not_found(name))?;
            if c.target != TargetState::Stopped {
                return Err(EngineError::BadRequest(format!(
                    "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/{name}/stop' endpoint"
                )));
            }
        }
        self.inner.topics.put_offsets(name, &entries).await?;
        let mut all = self.inner.offsets.lock().unwrap_or_else(|e| e.into_inner());
        let mine = all.entry(name.to_owned()).or_default();
        for (partition, offset) in entries {
            mine.retain(|(p, _)| *p != partition);
            if let Some(o) = offset {
                mine.push((partition, o));
            }
        }
        Ok(())
    }

    /// Resets every offset of a STOPPED connector.
    pub async fn reset_offsets(&self, name: &str) -> Result<(), EngineError> {
        let partitions: Vec<(OffsetMap, Option<OffsetMap>)> = self
            .offsets(name)
            .await?
            .into_iter()
            .map(|(p, _)| (p, None))
            .collect();
        self.alter_offsets(name, partitions).await
    }

    /// Topics the connector has written to since it was created (or reset).
    pub async fn active_topics(&self, name: &str) -> Result<Vec<String>, EngineError> {
        let connectors = self.inner.connectors.lock().await;
        let c = connectors.get(name).ok_or_else(|| not_found(name))?;
        let topics = c.active_topics.lock().unwrap_or_else(|e| e.into_inner());
        Ok(topics.iter().cloned().collect())
    }

    pub async fn reset_active_topics(&self, name: &str) -> Result<(), EngineError> {
        let connectors = self.inner.connectors.lock().await;
        let c = connectors.get(name).ok_or_else(|| not_found(name))?;
        c.active_topics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }

    /// The worker's metrics in the Prometheus text format (see [`crate::metrics`]).
    pub async fn prometheus(&self) -> String {
        let dir = self.inner.log.dir().to_path_buf();
        let disk = tokio::task::spawn_blocking(move || metrics::dir_size(&dir).ok())
            .await
            .ok()
            .flatten();
        let log = &self.inner.log;
        let mut partitions = Vec::new();
        for topic in log.topics() {
            for p in 0..log.partition_count(&topic).unwrap_or(0) {
                if let (Ok(start), Ok(end)) =
                    (log.earliest_offset(&topic, p), log.latest_offset(&topic, p))
                {
                    partitions.push(metrics::PartitionSample {
                        topic: topic.clone(),
                        partition: p,
                        start_offset: start,
                        end_offset: end,
                    });
                }
            }
        }
        let connectors = self.inner.connectors.lock().await;
        let statuses: Vec<(&String, &Connector, ConnectorStateInfo)> = connectors
            .iter()
            .map(|(name, c)| (name, c, self.status_of(name, c)))
            .collect();
        let samples: Vec<metrics::ConnectorSample<'_>> = statuses
            .iter()
            .map(|(name, c, status)| metrics::ConnectorSample {
                name,
                state: status.connector.state,
                tasks: c
                    .tasks
                    .iter()
                    .zip(&status.tasks)
                    .map(|(t, s)| metrics::TaskSample {
                        connector: name,
                        task: s.id,
                        state: s.state,
                        shared: &t.shared,
                    })
                    .collect(),
            })
            .collect();
        metrics::render(&samples, &partitions, disk)
    }

    pub fn plugin_infos(&self, connectors_only: bool) -> Vec<PluginInfo> {
        self.inner.plugins.plugin_infos(connectors_only)
    }

    /// Stops every task (committing what is at a boundary) and waits for them.
    pub async fn shutdown(&self) {
        let mut handles = Vec::new();
        {
            let mut connectors = self.inner.connectors.lock().await;
            for c in connectors.values_mut() {
                handles.extend(take_tasks(c));
            }
        }
        join_all(handles).await;
    }

    /// Starts the connector's tasks according to its target state. Config-provider
    /// placeholders are resolved here (and again for each task in [`Self::task_setup`]); the
    /// task configs kept for `GET /connectors/{name}/tasks` have them put back.
    fn start_connector(&self, name: &str, c: &mut Connector) {
        // Callers start a connector without tasks (see `lock_with_tasks_stopped`). Should one
        // still have some, they are told to stop rather than dropped while running.
        let leftover = take_tasks(c);
        if !leftover.is_empty() {
            tracing::error!(connector = %name, tasks = leftover.len(), "starting a connector whose tasks were still running; stopping them");
            tokio::spawn(join_all(leftover));
        }
        if c.target == TargetState::Stopped {
            c.state = (State::Stopped, None);
            return;
        }
        let class = c.config.get("connector.class").cloned().unwrap_or_default();
        let plugin = match self.inner.plugins.find_any(&class) {
            Ok(AnyConnector::Source(p)) => p,
            Ok(AnyConnector::Sink(p)) => {
                c.kind = "sink";
                self.start_sink_connector(name, c, p);
                return;
            }
            Err(message) => {
                c.state = (State::Failed, Some(message));
                return;
            }
        };
        let connector = (plugin.factory)();
        let Some((resolved, max_tasks, task_configs)) =
            plan_tasks(name, c, &connector.config_def(), |props, max| {
                connector.task_configs(props, max)
            })
        else {
            return;
        };
        for (i, task_props) in task_configs.into_iter().take(max_tasks).enumerate() {
            let mut props = resolved.props.clone();
            props.extend(task_props);
            let props = providers::unresolve(&props, &c.config, &resolved);
            let shared = TaskShared::new(control_for(c.target));
            let handle = self
                .task_setup(name, c, i as u32, props.clone(), shared.clone())
                .map(|setup| tokio::spawn(supervise(setup)));
            c.tasks.push(RunningTask {
                config: props,
                shared,
                handle,
            });
        }
    }

    /// Starts a sink connector's tasks (see [`crate::sink_runner`]).
    fn start_sink_connector(&self, name: &str, c: &mut Connector, plugin: SinkPlugin) {
        let connector = (plugin.factory)();
        let Some((resolved, max_tasks, task_configs)) =
            plan_tasks(name, c, &connector.config_def(), |props, max| {
                connector.task_configs(props, max)
            })
        else {
            return;
        };
        let task_count = task_configs.len().clamp(1, max_tasks) as u32;
        for (i, task_props) in task_configs.into_iter().take(max_tasks).enumerate() {
            let mut props = resolved.props.clone();
            props.extend(task_props);
            let stored_props = providers::unresolve(&props, &c.config, &resolved);
            let shared = TaskShared::new(control_for(c.target));
            let handle = self
                .sink_setup(name, c, i as u32, task_count, &stored_props, shared.clone())
                .map(|setup| tokio::spawn(crate::sink_runner::supervise_sink(setup)));
            c.tasks.push(RunningTask {
                config: stored_props,
                shared,
                handle,
            });
        }
    }

    /// Everything a sink task run needs; `None` (with the task FAILED) when the config cannot
    /// be used.
    fn sink_setup(
        &self,
        name: &str,
        c: &Connector,
        task_id: u32,
        task_count: u32,
        props: &Properties,
        shared: Arc<TaskShared>,
    ) -> Option<crate::sink_runner::SinkSetup> {
        let class = c.config.get("connector.class").cloned().unwrap_or_default();
        let Ok(AnyConnector::Sink(plugin)) = self.inner.plugins.find_any(&class) else {
            shared.set_status(
                State::Failed,
                Some(format!("{class} is not a sink connector")),
            );
            return None;
        };
        let connector_config = providers::resolve(&c.config);
        let task_config = providers::resolve(props);
        if let Some(trace) =
            provider_failure(&connector_config).or_else(|| provider_failure(&task_config))
        {
            shared.set_status(State::Failed, Some(trace));
            return None;
        }
        let config = &connector_config.props;
        let fail = |e: headwater_api::ConnectError| -> Option<crate::sink_runner::SinkSetup> {
            shared.set_status(State::Failed, Some(connector_config.mask(&e.trace())));
            None
        };
        let chain = match self.inner.plugins.transforms().build(config) {
            Ok(chain) => chain,
            Err(e) => return fail(e),
        };
        let converters = match Converters::from_props(config) {
            Ok(conv) => Arc::new(conv),
            Err(e) => return fail(e),
        };
        let subscription = match crate::sink_runner::Subscription::from_props(config) {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        let get = |k: &str| config.get(k).map(|v| v.trim().to_ascii_lowercase());
        let factory = plugin.factory.clone();
        Some(crate::sink_runner::SinkSetup {
            connector: name.to_owned(),
            task_id,
            task_count,
            props: task_config.props,
            make_task: Arc::new(move || (factory)().create_task()),
            chain,
            converters,
            subscription,
            topics: self.inner.topics.clone(),
            offsets: self.inner.offsets.clone(),
            shared: shared.clone(),
            errors_tolerance_all: get("errors.tolerance").as_deref() == Some("all"),
            errors_log: get("errors.log.enable").as_deref() == Some("true"),
            backoff_initial: self.inner.config.task_backoff_initial,
            backoff_max: self.inner.config.task_backoff_max,
        })
    }

    /// Everything a task run needs; `props` is the task config as stored (placeholders
    /// unresolved). `None` (with the task FAILED) when the config cannot be used.
    fn task_setup(
        &self,
        name: &str,
        c: &mut Connector,
        task_id: u32,
        props: Properties,
        shared: Arc<TaskShared>,
    ) -> Option<TaskSetup> {
        let class = c.config.get("connector.class").cloned().unwrap_or_default();
        let plugin = self.inner.plugins.find_connector(&class).ok()?.clone();
        let connector_config = providers::resolve(&c.config);
        let task_config = providers::resolve(&props);
        if let Some(trace) =
            provider_failure(&connector_config).or_else(|| provider_failure(&task_config))
        {
            tracing::error!(connector = %name, task = task_id, error = %trace, "cannot start the task");
            shared.set_status(State::Failed, Some(trace));
            return None;
        }
        tracing::debug!(connector = %name, task = task_id, config = ?providers::redacted(&props, Some(&(plugin.factory)().config_def())), "starting task");
        let config = &connector_config.props;
        let chain = match self.inner.plugins.transforms().build(config) {
            Ok(chain) => chain,
            Err(e) => {
                shared.set_status(State::Failed, Some(connector_config.mask(&e.trace())));
                return None;
            }
        };
        let factory = plugin.factory.clone();
        let make_task: Arc<dyn Fn() -> Box<dyn SourceTask> + Send + Sync> =
            Arc::new(move || (factory)().create_task());
        let get = |k: &str| config.get(k).map(|v| v.trim().to_ascii_lowercase());
        let partitions = config
            .get("topic.creation.default.partitions")
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(1)
            .max(1);
        let mut topic_config = TopicConfig::default();
        if let Some(policy) = config.get("topic.creation.default.cleanup.policy") {
            let mut m = BTreeMap::new();
            m.insert("cleanup.policy".to_string(), policy.clone());
            if let Ok(cfg) = TopicConfig::from_kafka_configs(&m) {
                topic_config = cfg;
            }
        }
        let converters = match Converters::from_props(config) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                shared.set_status(State::Failed, Some(connector_config.mask(&e.trace())));
                return None;
            }
        };
        Some(TaskSetup {
            connector: name.to_owned(),
            task_id,
            props: task_config.props,
            make_task,
            chain,
            converters,
            topics: self.inner.topics.clone(),
            offsets: self.inner.offsets.clone(),
            shared,
            topic_defaults: TopicDefaults {
                partitions,
                config: topic_config,
            },
            default_compression: self.inner.config.default_compression,
            errors_tolerance_all: get("errors.tolerance").as_deref() == Some("all"),
            errors_log: get("errors.log.enable").as_deref() == Some("true"),
            errors_log_include_messages: get("errors.log.include.messages").as_deref()
                == Some("true"),
            active_topics: c.active_topics.clone(),
            backoff_initial: self.inner.config.task_backoff_initial,
            backoff_max: self.inner.config.task_backoff_max,
        })
    }
}

/// What starting a connector of either kind begins with: log its (redacted) config, resolve
/// placeholders, and split the work into at most `tasks.max` task configs. `None` with the
/// connector FAILED when that is not possible; else the connector is RUNNING with no tasks yet.
fn plan_tasks(
    name: &str,
    c: &mut Connector,
    connector_def: &ConfigDef,
    task_configs: impl FnOnce(
        &Properties,
        usize,
    ) -> Result<Vec<Properties>, headwater_api::ConnectError>,
) -> Option<(Resolved, usize, Vec<Properties>)> {
    let def = framework_config_def().merge(connector_def.clone());
    tracing::info!(connector = %name, kind = c.kind, config = ?providers::redacted(&c.config, Some(&def)), "starting connector");
    let resolved = providers::resolve(&c.config);
    if let Some(trace) = provider_failure(&resolved) {
        tracing::error!(connector = %name, error = %trace, "cannot start the connector");
        c.state = (State::Failed, Some(trace));
        return None;
    }
    let max_tasks = resolved
        .props
        .get("tasks.max")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let configs = match task_configs(&resolved.props, max_tasks) {
        Ok(t) => t,
        Err(e) => {
            c.state = (State::Failed, Some(resolved.mask(&e.trace())));
            return None;
        }
    };
    c.state = (State::Running, None);
    c.tasks.clear();
    Some((resolved, max_tasks, configs))
}

/// A sink's `topics` / `topics.regex`: exactly one of them (Kafka Connect's rule).
fn validate_sink_subscription(props: &Properties) -> ConfigValidation {
    let mut v = ConfigValidation::default();
    let set = |k: &str| props.get(k).is_some_and(|x| !x.trim().is_empty());
    match (set("topics"), set("topics.regex")) {
        (true, true) => {
            v.add_error(
                "topics",
                "topics and topics.regex are mutually exclusive options, but both are set.",
            );
            v.add_error(
                "topics.regex",
                "topics and topics.regex are mutually exclusive options, but both are set.",
            );
        }
        (false, false) => {
            v.add_error("topics", "Must configure one of topics or topics.regex");
            v.add_error(
                "topics.regex",
                "Must configure one of topics or topics.regex",
            );
        }
        (false, true) => {
            if let Err(e) = regex::Regex::new(props.get("topics.regex").map_or("", String::as_str))
            {
                v.add_error("topics.regex", format!("Invalid regex: {e}"));
            }
        }
        (true, false) => {}
    }
    v
}

/// The FAILED trace for a config whose placeholders could not all be resolved.
fn provider_failure(resolved: &Resolved) -> Option<String> {
    if resolved.errors.is_empty() {
        return None;
    }
    let lines: Vec<String> = resolved
        .errors
        .iter()
        .map(|(key, message)| format!("{key}: {message}"))
        .collect();
    Some(format!("Config provider error: {}", lines.join("; ")))
}

/// The outcome of [`Engine::validate`]: the validation of the resolved config, shown with the
/// placeholders put back wherever a resolved value would appear.
pub struct ValidationReport {
    pub validation: ConfigValidation,
    resolved: Resolved,
}

impl ValidationReport {
    /// Total number of errors.
    pub fn error_count(&self) -> usize {
        self.validation.error_count()
    }

    /// Kafka Connect's 400 message listing every error.
    pub fn error_message(&self) -> String {
        self.resolved.mask(&self.validation.error_message())
    }

    /// Kafka Connect's `ConfigInfos` JSON.
    pub fn to_config_infos(&self, name: &str) -> serde_json::Value {
        let mut json = self.validation.to_config_infos(name);
        mask_json(&mut json, &self.resolved);
        json
    }
}

fn mask_json(value: &mut serde_json::Value, resolved: &Resolved) {
    match value {
        serde_json::Value::String(s) => {
            if let Some((_, raw)) = resolved.masks.iter().find(|(v, _)| v == s) {
                *s = raw.clone();
            } else {
                *s = resolved.mask(s);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| mask_json(v, resolved)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| mask_json(v, resolved)),
        _ => {}
    }
}

fn control_for(target: TargetState) -> Control {
    match target {
        TargetState::Started => Control::Run,
        TargetState::Paused => Control::Pause,
        TargetState::Stopped => Control::Stop,
    }
}

fn take_tasks(c: &mut Connector) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    for t in &mut c.tasks {
        t.shared.control.send_replace(Control::Stop);
        if let Some(h) = t.handle.take() {
            handles.push(h);
        }
    }
    c.tasks.clear();
    handles
}

async fn join_all(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

fn not_found(name: &str) -> EngineError {
    EngineError::NotFound(format!("Connector {name} not found"))
}

fn info_of(name: &str, c: &Connector) -> ConnectorInfo {
    ConnectorInfo {
        name: name.to_owned(),
        config: c.config.clone(),
        tasks: (0..c.tasks.len() as u32)
            .map(|task| TaskId {
                connector: name.to_owned(),
                task,
            })
            .collect(),
        connector_type: c.kind.into(),
    }
}
