//! The engine's view of connectors and tasks as the REST API shows them (Kafka Connect's
//! `ConnectorInfo`, `ConnectorStateInfo`, `TaskInfo` shapes), and target states.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a connector is asked to be (stored in the config topic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TargetState {
    Started,
    Paused,
    Stopped,
}

impl TargetState {
    /// Parses REST's `initial_state` (`RUNNING|PAUSED|STOPPED`, case-insensitive).
    pub fn from_initial_state(text: &str) -> Option<Self> {
        match text.to_ascii_uppercase().as_str() {
            "RUNNING" => Some(TargetState::Started),
            "PAUSED" => Some(TargetState::Paused),
            "STOPPED" => Some(TargetState::Stopped),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            TargetState::Started => "STARTED",
            TargetState::Paused => "PAUSED",
            TargetState::Stopped => "STOPPED",
        }
    }
}

/// A connector's or task's runtime state as shown in `/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum State {
    Unassigned,
    Running,
    Paused,
    Stopped,
    Failed,
    Restarting,
}

/// `{"connector": name, "task": n}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskId {
    pub connector: String,
    pub task: u32,
}

/// Kafka Connect's `ConnectorInfo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorInfo {
    pub name: String,
    pub config: BTreeMap<String, String>,
    pub tasks: Vec<TaskId>,
    #[serde(rename = "type")]
    pub connector_type: String,
}

/// One state entry of `/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateEntry {
    pub state: State,
    pub worker_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

/// A task's entry in `/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    pub id: u32,
    pub state: State,
    pub worker_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Headwater's addition: the task's snapshot progress, once it started one (Kafka Connect
    /// clients ignore the unknown member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotState>,
    /// Headwater's addition: what the task waits for while it cannot make progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitingState>,
}

/// The `waiting` member of a task's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingState {
    pub reason: String,
    /// When the wait began (ms since the Unix epoch).
    pub since_ms: i64,
}

/// The `snapshot` member of a task's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotState {
    pub running: bool,
    pub rows: u64,
    pub rows_estimated: u64,
    pub tables: u64,
    pub tables_done: u64,
}

/// Kafka Connect's `ConnectorStateInfo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorStateInfo {
    pub name: String,
    pub connector: StateEntry,
    pub tasks: Vec<TaskState>,
    #[serde(rename = "type")]
    pub connector_type: String,
}

/// Kafka Connect's `TaskInfo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInfo {
    pub id: TaskId,
    pub config: BTreeMap<String, String>,
}

/// Kafka Connect's `PluginInfo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginInfo {
    pub class: String,
    #[serde(rename = "type")]
    pub plugin_type: String,
    pub version: String,
}
