//! The classic consumer group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and the
//! state machine behind them, as Kafka's group coordinator runs it.
//!
//! States: `Empty` -> `PreparingRebalance` (a member joined or left, or a session expired)
//! -> `CompletingRebalance` (every member rejoined or the rebalance timeout passed: a new
//! generation, a leader, a protocol) -> `Stable` (the leader's SyncGroup delivered the
//! assignments). Invariants:
//! - a JoinGroup answer is held until the rebalance completes; a member that does not rejoin
//!   within the rebalance timeout is removed; the first rebalance of an empty group waits
//!   `initial_rebalance_delay` for more members (Kafka's `group.initial.rebalance.delay.ms`);
//! - a SyncGroup answer is held until the leader sends the assignments of this generation;
//! - a member whose heartbeats stop for its session timeout is removed (and the group
//!   rebalances); members waiting in JoinGroup/SyncGroup are not expired meanwhile;
//! - assignor metadata and assignments are opaque bytes passed through unchanged, so the
//!   range, round-robin, sticky and cooperative-sticky assignors all work (cooperative
//!   rebalancing is driven by the clients on top of this protocol);
//! - group membership is in memory only: after a restart members get `UNKNOWN_MEMBER_ID` and
//!   rejoin; committed offsets are durable (see `offsets.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupResponse, SyncGroupResponse};
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

/// Kafka's `group.min.session.timeout.ms` and `group.max.session.timeout.ms`.
pub const MIN_SESSION_TIMEOUT_MS: i32 = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: i32 = 1_800_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    last_heartbeat: Instant,
    join_order: u64,
    join_waiter: Option<oneshot::Sender<JoinGroupResponse>>,
    sync_waiter: Option<oneshot::Sender<SyncGroupResponse>>,
}

struct Group {
    state: GroupState,
    protocol_type: Option<String>,
    protocol: Option<String>,
    generation: i32,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// When the current rebalance completes even if not every member rejoined.
    rebalance_deadline: Option<Instant>,
    /// Set while an empty group's first rebalance waits for more members.
    initial_delay: Option<(Instant, Instant)>,
    next_join_order: u64,
}

impl Group {
    fn new() -> Group {
        Group {
            state: GroupState::Empty,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            rebalance_deadline: None,
            initial_delay: None,
            next_join_order: 0,
        }
    }
}

/// What DescribeGroups shows of a group.
pub struct GroupDescription {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    /// (member id, instance id, client id, client host, metadata, assignment)
    pub members: Vec<MemberDescription>,
}

pub struct MemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A JoinGroup as received.
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
}

/// How a commit relates to the group's membership.
pub enum CommitCheck {
    Ok,
    Error(ResponseError),
}

/// All groups of this worker.
#[derive(Clone)]
pub struct Coordinator {
    groups: Arc<Mutex<BTreeMap<String, Group>>>,
    initial_rebalance_delay: Duration,
}

fn err_join(code: ResponseError, member_id: &str) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.error_code = code.code();
    r.generation_id = -1;
    r.member_id = member_id.to_owned().into();
    r
}

fn err_sync(code: ResponseError) -> SyncGroupResponse {
    let mut r = SyncGroupResponse::default();
    r.error_code = code.code();
    r
}

impl Coordinator {
    pub fn new(initial_rebalance_delay: Duration) -> Coordinator {
        Coordinator {
            groups: Arc::new(Mutex::new(BTreeMap::new())),
            initial_rebalance_delay,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Handles a JoinGroup; the answer arrives when the rebalance completes.
    pub async fn join(&self, req: JoinRequest) -> JoinGroupResponse {
        let rx = match self.join_start(req) {
            Ok(rx) => rx,
            Err(resp) => return *resp,
        };
        match rx.await {
            Ok(resp) => resp,
            // The member was removed (left, or the group was deleted) while waiting.
            Err(_) => err_join(ResponseError::UnknownMemberId, ""),
        }
    }

    fn join_start(
        &self,
        req: JoinRequest,
    ) -> Result<oneshot::Receiver<JoinGroupResponse>, Box<JoinGroupResponse>> {
        if req.group_id.is_empty() {
            return Err(Box::new(err_join(
                ResponseError::InvalidGroupId,
                &req.member_id,
            )));
        }
        if !(MIN_SESSION_TIMEOUT_MS..=MAX_SESSION_TIMEOUT_MS).contains(&req.session_timeout_ms) {
            return Err(Box::new(err_join(
                ResponseError::InvalidSessionTimeout,
                &req.member_id,
            )));
        }
        if req.protocols.is_empty() || req.protocol_type.is_empty() {
            return Err(Box::new(err_join(
                ResponseError::InconsistentGroupProtocol,
                &req.member_id,
            )));
        }
        let now = Instant::now();
        let mut groups = self.lock();
        let group = groups
            .entry(req.group_id.clone())
            .or_insert_with(Group::new);
        if !group.members.is_empty() {
            if group.protocol_type.as_deref() != Some(req.protocol_type.as_str()) {
                return Err(Box::new(err_join(
                    ResponseError::InconsistentGroupProtocol,
                    &req.member_id,
                )));
            }
            let common = group.members.values().all(|m| {
                m.id == req.member_id
                    || m.protocols
                        .iter()
                        .any(|(n, _)| req.protocols.iter().any(|(r, _)| r == n))
            });
            if !common {
                return Err(Box::new(err_join(
                    ResponseError::InconsistentGroupProtocol,
                    &req.member_id,
                )));
            }
        }
        // A static member rejoining under a new id replaces its old registration.
        if let Some(instance) = &req.instance_id {
            let old: Vec<String> = group
                .members
                .values()
                .filter(|m| m.instance_id.as_deref() == Some(instance) && m.id != req.member_id)
                .map(|m| m.id.clone())
                .collect();
            for id in old {
                group.members.remove(&id);
                if group.leader.as_deref() == Some(&id) {
                    group.leader = None;
                }
            }
        }
        let member_id = if req.member_id.is_empty() {
            new_member_id(&req.client_id)
        } else {
            if !group.members.contains_key(&req.member_id) {
                return Err(Box::new(err_join(
                    ResponseError::UnknownMemberId,
                    &req.member_id,
                )));
            }
            req.member_id.clone()
        };
        let (tx, rx) = oneshot::channel();
        let order = group.next_join_order;
        group.next_join_order += 1;
        let member = group
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                id: member_id.clone(),
                instance_id: req.instance_id.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                session_timeout: Duration::ZERO,
                rebalance_timeout: Duration::ZERO,
                protocols: Vec::new(),
                assignment: Bytes::new(),
                last_heartbeat: now,
                join_order: order,
                join_waiter: None,
                sync_waiter: None,
            });
        member.session_timeout = Duration::from_millis(req.session_timeout_ms as u64);
        member.rebalance_timeout =
            Duration::from_millis(req.rebalance_timeout_ms.max(req.session_timeout_ms) as u64);
        member.protocols = req.protocols;
        member.last_heartbeat = now;
        member.join_waiter = Some(tx);
        if let Some(waiter) = member.sync_waiter.take() {
            let _ = waiter.send(err_sync(ResponseError::RebalanceInProgress));
        }
        group.protocol_type = Some(req.protocol_type);
        match group.state {
            GroupState::Empty => {
                let delay = self.initial_rebalance_delay;
                let limit = now + member_rebalance_timeout(group);
                group.initial_delay = Some(((now + delay).min(limit), limit));
                prepare_rebalance(group, now);
            }
            GroupState::PreparingRebalance => {
                if let Some((_, limit)) = group.initial_delay {
                    group.initial_delay =
                        Some(((now + self.initial_rebalance_delay).min(limit), limit));
                }
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                prepare_rebalance(group, now);
            }
        }
        maybe_complete_join(group, now);
        Ok(rx)
    }

    /// Handles a SyncGroup; followers' answers arrive with the leader's assignments.
    pub async fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncGroupResponse {
        let rx = {
            let mut groups = self.lock();
            let Some(group) = groups.get_mut(group_id) else {
                return err_sync(ResponseError::UnknownMemberId);
            };
            if !group.members.contains_key(member_id) {
                return err_sync(ResponseError::UnknownMemberId);
            }
            if generation != group.generation {
                return err_sync(ResponseError::IllegalGeneration);
            }
            match group.state {
                GroupState::Empty | GroupState::PreparingRebalance => {
                    return err_sync(ResponseError::RebalanceInProgress);
                }
                GroupState::Stable => {
                    let mut r = sync_ok(group);
                    r.assignment = group.members[member_id].assignment.clone();
                    return r;
                }
                GroupState::CompletingRebalance => {}
            }
            let (tx, rx) = oneshot::channel();
            if let Some(m) = group.members.get_mut(member_id) {
                m.sync_waiter = Some(tx);
                m.last_heartbeat = Instant::now();
            }
            if group.leader.as_deref() == Some(member_id) {
                let mut by_member: BTreeMap<String, Bytes> = assignments.into_iter().collect();
                group.state = GroupState::Stable;
                let template = sync_ok(group);
                for m in group.members.values_mut() {
                    m.assignment = by_member.remove(&m.id).unwrap_or_default();
                    if let Some(waiter) = m.sync_waiter.take() {
                        let mut r = template.clone();
                        r.assignment = m.assignment.clone();
                        let _ = waiter.send(r);
                    }
                }
            }
            rx
        };
        rx.await
            .unwrap_or_else(|_| err_sync(ResponseError::RebalanceInProgress))
    }

    /// Handles a Heartbeat; returns the error code.
    pub fn heartbeat(&self, group_id: &str, member_id: &str, generation: i32) -> i16 {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        let state = group.state;
        let current = group.generation;
        let Some(m) = group.members.get_mut(member_id) else {
            return ResponseError::UnknownMemberId.code();
        };
        m.last_heartbeat = Instant::now();
        if state == GroupState::PreparingRebalance {
            return ResponseError::RebalanceInProgress.code();
        }
        if generation != current {
            return ResponseError::IllegalGeneration.code();
        }
        0
    }

    /// Removes members (by member id, or by instance id when the member id is empty); returns
    /// an error code per member.
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Vec<i16> {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id) else {
            return members
                .iter()
                .map(|_| ResponseError::UnknownMemberId.code())
                .collect();
        };
        let now = Instant::now();
        let mut codes = Vec::with_capacity(members.len());
        let mut removed_any = false;
        for (member_id, instance_id) in members {
            let id = if member_id.is_empty() {
                group
                    .members
                    .values()
                    .find(|m| m.instance_id.is_some() && m.instance_id == *instance_id)
                    .map(|m| m.id.clone())
            } else {
                Some(member_id.clone())
            };
            match id.and_then(|id| group.members.remove(&id)) {
                Some(m) => {
                    if let Some(w) = m.join_waiter {
                        let _ = w.send(err_join(ResponseError::UnknownMemberId, &m.id));
                    }
                    if let Some(w) = m.sync_waiter {
                        let _ = w.send(err_sync(ResponseError::UnknownMemberId));
                    }
                    if group.leader.as_deref() == Some(m.id.as_str()) {
                        group.leader = None;
                    }
                    tracing::debug!(group = group_id, member = %m.id, "member left the group");
                    removed_any = true;
                    codes.push(0);
                }
                None => codes.push(ResponseError::UnknownMemberId.code()),
            }
        }
        if removed_any {
            after_removal(group, now);
        }
        codes
    }

    /// Expires members whose sessions ended and completes rebalances whose time is up. Called
    /// periodically.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut groups = self.lock();
        for (name, group) in groups.iter_mut() {
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| {
                    m.join_waiter.is_none()
                        && m.sync_waiter.is_none()
                        && group.state != GroupState::PreparingRebalance
                        && now.duration_since(m.last_heartbeat) > m.session_timeout
                })
                .map(|m| m.id.clone())
                .collect();
            for id in &expired {
                tracing::info!(group = %name, member = %id, "member session expired; rebalancing");
                group.members.remove(id);
                if group.leader.as_deref() == Some(id.as_str()) {
                    group.leader = None;
                }
            }
            if !expired.is_empty() {
                after_removal(group, now);
            }
            if group.state == GroupState::PreparingRebalance {
                maybe_complete_join(group, now);
            }
        }
        groups.retain(|_, g| !(g.state == GroupState::Empty && g.members.is_empty()));
    }

    /// Checks that a commit from `member_id` at `generation` is allowed.
    pub fn check_commit(&self, group_id: &str, member_id: &str, generation: i32) -> CommitCheck {
        let groups = self.lock();
        let group = groups.get(group_id);
        if generation < 0 && member_id.is_empty() {
            // A commit outside group management (manual assignment): only while no member
            // is active.
            return match group {
                Some(g) if !g.members.is_empty() => {
                    CommitCheck::Error(ResponseError::UnknownMemberId)
                }
                _ => CommitCheck::Ok,
            };
        }
        let Some(group) = group else {
            return CommitCheck::Error(ResponseError::UnknownMemberId);
        };
        let Some(_member) = group.members.get(member_id) else {
            return CommitCheck::Error(ResponseError::UnknownMemberId);
        };
        if generation != group.generation {
            return CommitCheck::Error(ResponseError::IllegalGeneration);
        }
        if group.state == GroupState::CompletingRebalance {
            return CommitCheck::Error(ResponseError::RebalanceInProgress);
        }
        CommitCheck::Ok
    }

    /// Describes a group (`None` when it has no members and no state).
    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let groups = self.lock();
        let group = groups.get(group_id)?;
        let protocol = group.protocol.clone().unwrap_or_default();
        let mut members: Vec<&Member> = group.members.values().collect();
        members.sort_by_key(|m| m.join_order);
        Some(GroupDescription {
            state: group.state.name(),
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol: if group.state == GroupState::Stable {
                protocol.clone()
            } else {
                String::new()
            },
            members: members
                .into_iter()
                .map(|m| MemberDescription {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == protocol)
                        .map(|(_, b)| b.clone())
                        .unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// (group id, protocol type, state) of every group with members.
    pub fn list(&self) -> Vec<(String, String, &'static str)> {
        let groups = self.lock();
        groups
            .iter()
            .map(|(id, g)| {
                (
                    id.clone(),
                    g.protocol_type.clone().unwrap_or_default(),
                    g.state.name(),
                )
            })
            .collect()
    }

    /// Whether the group has active members (DeleteGroups refuses those).
    pub fn has_members(&self, group_id: &str) -> bool {
        self.lock()
            .get(group_id)
            .is_some_and(|g| !g.members.is_empty())
    }
}

/// A member id as Kafka makes them: the client id and a unique suffix.
fn new_member_id(client_id: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let prefix = if client_id.is_empty() {
        "member"
    } else {
        client_id
    };
    format!("{prefix}-{nanos:016x}-{n:08x}")
}

fn member_rebalance_timeout(group: &Group) -> Duration {
    group
        .members
        .values()
        .map(|m| m.rebalance_timeout)
        .max()
        .unwrap_or(Duration::from_secs(60))
}

fn prepare_rebalance(group: &mut Group, now: Instant) {
    if group.state == GroupState::CompletingRebalance {
        for m in group.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(err_sync(ResponseError::RebalanceInProgress));
            }
        }
    }
    if group.state != GroupState::PreparingRebalance {
        group.rebalance_deadline = Some(now + member_rebalance_timeout(group));
    }
    group.state = GroupState::PreparingRebalance;
}

/// After members were removed: rebalance the rest, or become empty.
fn after_removal(group: &mut Group, now: Instant) {
    if group.members.is_empty() {
        group.state = GroupState::Empty;
        group.generation += 1;
        group.leader = None;
        group.protocol = None;
        group.rebalance_deadline = None;
        group.initial_delay = None;
        return;
    }
    prepare_rebalance(group, now);
    maybe_complete_join(group, now);
}

/// Completes the join phase when every member has rejoined (and any initial delay is over),
/// or when the rebalance deadline passed (dropping members that did not rejoin).
fn maybe_complete_join(group: &mut Group, now: Instant) {
    if group.state != GroupState::PreparingRebalance {
        return;
    }
    let deadline_passed = group.rebalance_deadline.is_some_and(|d| now >= d);
    if let Some((until, _)) = group.initial_delay {
        if now < until && !deadline_passed {
            return;
        }
    }
    let all_joined = group.members.values().all(|m| m.join_waiter.is_some());
    if !all_joined && !deadline_passed {
        return;
    }
    let missing: Vec<String> = group
        .members
        .values()
        .filter(|m| m.join_waiter.is_none())
        .map(|m| m.id.clone())
        .collect();
    for id in missing {
        tracing::info!(member = %id, "member did not rejoin within the rebalance timeout; removed");
        group.members.remove(&id);
    }
    group.initial_delay = None;
    group.rebalance_deadline = None;
    group.generation += 1;
    if group.members.is_empty() {
        group.state = GroupState::Empty;
        group.leader = None;
        group.protocol = None;
        return;
    }
    // The protocol every member supports that most members prefer (ties: the leader's order).
    let mut members: Vec<&Member> = group.members.values().collect();
    members.sort_by_key(|m| m.join_order);
    let candidates: Vec<String> = members[0]
        .protocols
        .iter()
        .map(|(n, _)| n.clone())
        .filter(|n| {
            members
                .iter()
                .all(|m| m.protocols.iter().any(|(p, _)| p == n))
        })
        .collect();
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &members {
        if let Some((n, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(n)) {
            *votes.entry(n.as_str()).or_default() += 1;
        }
    }
    let protocol = candidates
        .iter()
        .max_by_key(|n| {
            (
                votes.get(n.as_str()).copied().unwrap_or(0),
                std::cmp::Reverse(candidates.iter().position(|c| c == *n)),
            )
        })
        .cloned()
        .unwrap_or_default();
    let leader = match &group.leader {
        Some(l) if group.members.contains_key(l) => l.clone(),
        _ => members[0].id.clone(),
    };
    let member_list: Vec<JoinGroupResponseMember> = members
        .iter()
        .map(|m| {
            let mut e = JoinGroupResponseMember::default();
            e.member_id = m.id.clone().into();
            e.group_instance_id = m.instance_id.clone().map(Into::into);
            e.metadata = m
                .protocols
                .iter()
                .find(|(n, _)| *n == protocol)
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            e
        })
        .collect();
    group.protocol = Some(protocol.clone());
    group.leader = Some(leader.clone());
    group.state = GroupState::CompletingRebalance;
    let generation = group.generation;
    let protocol_type = group.protocol_type.clone();
    for m in group.members.values_mut() {
        m.last_heartbeat = now;
        if let Some(w) = m.join_waiter.take() {
            let mut r = JoinGroupResponse::default();
            r.error_code = 0;
            r.generation_id = generation;
            r.protocol_type = protocol_type.clone().map(Into::into);
            r.protocol_name = Some(protocol.clone().into());
            r.leader = leader.clone().into();
            r.member_id = m.id.clone().into();
            if m.id == leader {
                r.members = member_list.clone();
            }
            let _ = w.send(r);
        }
    }
    tracing::debug!(generation, leader = %leader, protocol = %protocol, "rebalance completed");
}

fn sync_ok(group: &Group) -> SyncGroupResponse {
    let mut r = SyncGroupResponse::default();
    r.protocol_type = group.protocol_type.clone().map(Into::into);
    r.protocol_name = group.protocol.clone().map(Into::into);
    r
}
