//! Debezium's file signal channel (`signal.enabled.channels` naming `file`): signals written
//! as JSON lines (`{"id": "...", "type": "execute-snapshot", "data": {...}}`) to `signal.file`,
//! read every `signal.poll.interval.ms` and acted on as if they had been inserted into the
//! signal table, at the next boundary between source transactions. An incremental snapshot
//! still writes its watermarks into `signal.data.collection`.
//!
//! As with Debezium's channel, each line is acted on once: a read takes every line in the
//! file, which is gone afterwards (Debezium empties it in place; here it is first renamed to
//! `<file>.reading`, read and removed, so a line appended while it is read goes into a new
//! file instead of being cut off). A line that is not a JSON object with a text `type` is
//! logged and skipped. `data` may be a JSON object (as Debezium writes it) or a string
//! holding one (as the signal table's column holds it).
//!
//! Invariants: the file is removed only after it was read whole (a `.reading` file left by a
//! crash is read at the next interval); nothing is read before the interval has passed since
//! the last read, so a missing file costs one `rename` per interval.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use headwater_api::{Properties, SnapshotProgress};
use serde_json::Value;

use crate::incremental::{on_signal, Progress, Window};
use crate::signal::{is_watermark, read_row, SnapshotRequest};

/// One line of the signal file: the signal's id, type and data (JSON text), the three columns
/// of a signal-table row.
#[derive(Debug, PartialEq, Eq)]
pub struct FileSignal {
    pub id: Option<String>,
    pub kind: Option<String>,
    pub data: Option<String>,
}

/// The file channel of one task.
#[derive(Debug)]
pub struct FileSignals {
    path: PathBuf,
    every: Duration,
    next_read: Instant,
}

impl FileSignals {
    /// The channel `props` configure, when `signal.enabled.channels` names `file`.
    pub fn from_props(props: &Properties) -> Option<FileSignals> {
        if !crate::config::channel_enabled(props, "file") {
            return None;
        }
        let path = props
            .get("signal.file")
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .unwrap_or("file-signals.txt");
        let every = props
            .get("signal.poll.interval.ms")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(5000);
        let path = PathBuf::from(path);
        tracing::info!(file = %path.display(), every_ms = every, "file signal channel: reading signals from the file");
        Some(FileSignals {
            path,
            every: Duration::from_millis(every),
            next_read: Instant::now(),
        })
    }

    /// The signals written since the last read, once the poll interval has passed (else
    /// none); the file is emptied. A file that cannot be read is logged and tried again at
    /// the next interval.
    pub fn due(&mut self) -> Vec<FileSignal> {
        let now = Instant::now();
        if now < self.next_read {
            return Vec::new();
        }
        self.next_read = now + self.every;
        match self.take_lines() {
            Ok(text) => parse_lines(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                tracing::warn!(file = %self.path.display(), error = %e, "the signal file cannot be read; trying again later");
                Vec::new()
            }
        }
    }

    /// Takes the file's lines: renames it aside (unless a crash left one aside already),
    /// reads it whole and removes it.
    fn take_lines(&self) -> std::io::Result<String> {
        let mut aside = self.path.clone().into_os_string();
        aside.push(".reading");
        let aside = PathBuf::from(aside);
        if !aside.exists() {
            if self.path.is_dir() {
                return Ok(String::new());
            }
            std::fs::rename(&self.path, &aside)?;
        }
        let bytes = std::fs::read(&aside)?;
        std::fs::remove_file(&aside)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Acts on signals read from the file, between source transactions, as on rows of the signal
/// table: an `execute-snapshot` request is merged into `pending` (the connector runs it at
/// once), `stop-snapshot`, `pause-snapshot` and `resume-snapshot` steer the incremental
/// snapshot, `log` is logged; watermarks are ignored (they belong in the signal table).
/// Returns whether the incremental snapshot's progress changed.
pub fn act_on<T, R>(
    signals: Vec<FileSignal>,
    pending: &mut Option<SnapshotRequest>,
    window: &mut Option<Window<T, R>>,
    progress: &mut Option<Progress>,
    status: &SnapshotProgress,
    notes: &crate::notification::Notifier,
) -> bool {
    let before = progress.as_ref().map(Progress::to_json);
    for s in signals {
        if is_watermark(s.kind.as_deref()) {
            tracing::warn!(signal = ?s.kind, "a watermark in the signal file is ignored (incremental snapshots write theirs into the signal table)");
            continue;
        }
        if let Some(signal) = read_row(s.id, s.kind, s.data, Some(pending)) {
            // Stop, pause or resume: no window closes here (only a close watermark does).
            let _ = on_signal(signal, window, progress, status, notes);
        }
    }
    progress.as_ref().map(Progress::to_json) != before
}

/// The signals of the file's lines, skipping (and logging) the ones that are not signals.
pub fn parse_lines(text: &str) -> Vec<FileSignal> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter_map(|line| match parse_line(line) {
            Ok(signal) => Some(signal),
            Err(why) => {
                tracing::warn!(line, reason = %why, "a line of the signal file is skipped");
                None
            }
        })
        .collect()
}

fn parse_line(line: &str) -> Result<FileSignal, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(fields) = v else {
        return Err("not a JSON object".into());
    };
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    };
    let kind = match fields.get("type") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err("no text \"type\"".into()),
    };
    Ok(FileSignal {
        id: fields.get("id").and_then(text),
        kind: Some(kind),
        data: fields.get("data").and_then(text),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_signals_and_bad_ones_are_skipped() {
        let got = parse_lines(
            "{\"id\": \"a\", \"type\": \"execute-snapshot\", \"data\": {\"data-collections\": [\"s.t\"]}}\n\
             \n\
             not json\n\
             {\"id\": 7, \"type\": \"log\", \"data\": \"{\\\"message\\\": \\\"hi\\\"}\"}\n\
             {\"id\": \"c\"}\n\
             [1]\n",
        );
        assert_eq!(
            got,
            vec![
                FileSignal {
                    id: Some("a".into()),
                    kind: Some("execute-snapshot".into()),
                    data: Some("{\"data-collections\":[\"s.t\"]}".into()),
                },
                FileSignal {
                    id: Some("7".into()),
                    kind: Some("log".into()),
                    data: Some("{\"message\": \"hi\"}".into()),
                },
            ]
        );
    }

    #[test]
    fn a_read_empties_the_file_and_waits_for_the_interval() {
        let dir = std::env::temp_dir().join(format!("hw-signal-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("signals.txt");
        let mut props = Properties::new();
        assert!(FileSignals::from_props(&props).is_none(), "off by default");
        props.insert("signal.enabled.channels".into(), "source,file".into());
        props.insert("signal.file".into(), path.display().to_string());
        props.insert("signal.poll.interval.ms".into(), "60000".into());
        let mut channel = FileSignals::from_props(&props).unwrap();
        assert!(channel.due().is_empty(), "no file yet");
        std::fs::write(&path, "{\"id\": \"1\", \"type\": \"log\", \"data\": {}}\n").unwrap();
        assert!(channel.due().is_empty(), "the interval has not passed");
        channel.next_read = Instant::now();
        assert_eq!(channel.due().len(), 1);
        assert!(!path.exists(), "taken");
        channel.next_read = Instant::now();
        assert!(channel.due().is_empty(), "read once");
        // A file set aside by a read a crash interrupted is read first.
        std::fs::write(
            dir.join("signals.txt.reading"),
            "{\"id\": \"2\", \"type\": \"log\", \"data\": {}}\n",
        )
        .unwrap();
        std::fs::write(&path, "{\"id\": \"3\", \"type\": \"log\", \"data\": {}}\n").unwrap();
        channel.next_read = Instant::now();
        assert_eq!(channel.due()[0].id.as_deref(), Some("2"));
        channel.next_read = Instant::now();
        assert_eq!(channel.due()[0].id.as_deref(), Some("3"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
