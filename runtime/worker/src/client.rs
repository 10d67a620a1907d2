//! The client subcommands: `headwater connectors ...`, `headwater topics` and
//! `headwater consume`, over a running worker's REST API (see [`crate::http`]).
//!
//! Invariants:
//! - output goes to stdout; the only thing on stderr is `main`'s single `error:` line;
//! - `--json`, or stdout not being a terminal, prints the REST answer as one line of JSON
//!   (so scripts get plain JSON); on a terminal `list`/`get`/`status`/`topics` print a short
//!   human form, hiding the values of keys that contain `password`;
//! - an HTTP error status is a runtime failure (exit 1) carrying Kafka Connect's `message`;
//!   usage problems (unreadable FILE, bad URL) exit 2;
//! - `consume` prints one JSON object per record and line,
//!   `{"topic","partition","offset","timestamp","key","value","headers"}`; a closed stdout
//!   (`| head`) ends it quietly.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::cli::{ClientArgs, Command, ConnectorsCommand, ConsumeArgs};
use crate::connector_files;
use crate::failure::Failure;
use crate::http::{segment, Endpoint, Response};

/// How often `consume --follow` asks for new records when it is caught up.
const FOLLOW_POLL: Duration = Duration::from_millis(250);
/// Records asked for per request.
const PAGE: u64 = 1000;

/// Runs a client subcommand.
pub fn run(command: Command) -> Result<(), Failure> {
    let mut out = Output::stdout();
    let result = match command {
        Command::Connectors { client, command } => {
            connectors(&endpoint(&client)?, command, &mut out)
        }
        Command::Topics { client, json } => topics(&endpoint(&client)?, json, &mut out),
        Command::Consume(args) => consume(&endpoint(&args.client)?, &args, &mut out),
        Command::Worker(_) | Command::Quickstart(_) | Command::Completions { .. } => {
            Err(Failure::usage("not a client subcommand"))
        }
    };
    match result {
        Err(_) if out.closed => Ok(()),
        other => other,
    }
}

fn endpoint(client: &ClientArgs) -> Result<Endpoint, Failure> {
    Endpoint::parse_trusting(
        &client.url,
        client.token.as_deref(),
        client.user.as_deref(),
        client.cacert.as_deref(),
    )
}

/// Stdout that remembers whether the reader went away.
struct Output {
    terminal: bool,
    closed: bool,
}

impl Output {
    fn stdout() -> Self {
        Output {
            terminal: std::io::stdout().is_terminal(),
            closed: false,
        }
    }

    fn json_wanted(&self, flag: bool) -> bool {
        flag || !self.terminal
    }

    fn line(&mut self, text: &str) -> Result<(), Failure> {
        let mut stdout = std::io::stdout().lock();
        match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
            Ok(()) => Ok(()),
            Err(e) => {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    self.closed = true;
                }
                Err(Failure::runtime(format!("cannot write to stdout: {e}")))
            }
        }
    }

    fn json(&mut self, value: &Value) -> Result<(), Failure> {
        self.line(&value.to_string())
    }
}

/// Sends a request and fails on an error status.
fn call(
    endpoint: &Endpoint,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Response, Failure> {
    let bytes = body.map(|b| b.to_string().into_bytes());
    let response = endpoint.request(method, path, bytes.as_deref())?;
    if response.is_success() {
        Ok(response)
    } else {
        Err(response.error())
    }
}

fn connectors(
    endpoint: &Endpoint,
    command: ConnectorsCommand,
    out: &mut Output,
) -> Result<(), Failure> {
    let path = |name: &str, rest: &str| format!("/connectors/{}{rest}", segment(name));
    match command {
        ConnectorsCommand::List { json } => {
            let body = call(endpoint, "GET", "/connectors", None)?.json()?;
            if out.json_wanted(json) {
                return out.json(&body);
            }
            for name in body.as_array().into_iter().flatten() {
                out.line(name.as_str().unwrap_or_default())?;
            }
            Ok(())
        }
        ConnectorsCommand::Get { name, json } => {
            let body = call(endpoint, "GET", &path(&name, ""), None)?.json()?;
            if out.json_wanted(json) {
                return out.json(&body);
            }
            print_info(&body, out)
        }
        ConnectorsCommand::Create { file, json } => {
            let config = connector_files::read_config(&file)?;
            let name = config
                .get("name")
                .cloned()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "connector file {} has no connector name (\"name\")",
                        file.display()
                    ))
                })?;
            let request = json!({"name": name, "config": config});
            let body = call(endpoint, "POST", "/connectors", Some(&request))?.json()?;
            if out.json_wanted(json) {
                return out.json(&body);
            }
            out.line(&format!("Created connector {name}"))
        }
        ConnectorsCommand::Update { name, file, json } => {
            let config = connector_files::read_config(&file)?;
            let request = serde_json::to_value(&config).unwrap_or(Value::Null);
            let response = call(endpoint, "PUT", &path(&name, "/config"), Some(&request))?;
            let created = response.status == 201;
            let body = response.json()?;
            if out.json_wanted(json) {
                return out.json(&body);
            }
            let verb = if created { "Created" } else { "Updated" };
            out.line(&format!("{verb} connector {name}"))
        }
        ConnectorsCommand::Status { name, json } => {
            let body = call(endpoint, "GET", &path(&name, "/status"), None)?.json()?;
            if out.json_wanted(json) {
                return out.json(&body);
            }
            print_status(&body, out)
        }
        ConnectorsCommand::Pause { name } => {
            call(endpoint, "PUT", &path(&name, "/pause"), None)?;
            out.line(&format!("Pausing connector {name}"))
        }
        ConnectorsCommand::Resume { name } => {
            call(endpoint, "PUT", &path(&name, "/resume"), None)?;
            out.line(&format!("Resuming connector {name}"))
        }
        ConnectorsCommand::Stop { name } => {
            call(endpoint, "PUT", &path(&name, "/stop"), None)?;
            out.line(&format!("Stopped connector {name}"))
        }
        ConnectorsCommand::Restart {
            name,
            include_tasks,
            only_failed,
            json,
        } => {
            let query = format!("/restart?includeTasks={include_tasks}&onlyFailed={only_failed}");
            let response = call(endpoint, "POST", &path(&name, &query), None)?;
            let body = response.json()?;
            if body.is_null() {
                return out.line(&format!("Restarted connector {name}"));
            }
            if out.json_wanted(json) {
                return out.json(&body);
            }
            print_status(&body, out)
        }
        ConnectorsCommand::Delete { name } => {
            call(endpoint, "DELETE", &path(&name, ""), None)?;
            out.line(&format!("Deleted connector {name}"))
        }
    }
}

fn print_info(body: &Value, out: &mut Output) -> Result<(), Failure> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    out.line(&format!("Name:   {}", s(&body["name"])))?;
    out.line(&format!("Type:   {}", s(&body["type"])))?;
    let tasks = body["tasks"].as_array().map_or(0, Vec::len);
    out.line(&format!("Tasks:  {tasks}"))?;
    out.line("Config:")?;
    for (k, v) in body["config"].as_object().into_iter().flatten() {
        let shown = if k.to_ascii_lowercase().contains("password") {
            "[hidden]".to_owned()
        } else {
            v.as_str().map_or_else(|| v.to_string(), str::to_owned)
        };
        out.line(&format!("  {k} = {shown}"))?;
    }
    Ok(())
}

fn print_status(body: &Value, out: &mut Output) -> Result<(), Failure> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    out.line(&format!(
        "Connector {} ({}): {} on {}",
        s(&body["name"]),
        s(&body["type"]),
        s(&body["connector"]["state"]),
        s(&body["connector"]["worker_id"])
    ))?;
    if let Some(trace) = body["connector"]["trace"].as_str() {
        out.line(&format!("  {}", trace.lines().next().unwrap_or_default()))?;
    }
    for task in body["tasks"].as_array().into_iter().flatten() {
        out.line(&format!("  task {}: {}", task["id"], s(&task["state"])))?;
        if let Some(trace) = task["trace"].as_str() {
            out.line(&format!("    {}", trace.lines().next().unwrap_or_default()))?;
        }
    }
    Ok(())
}

fn topics(endpoint: &Endpoint, json: bool, out: &mut Output) -> Result<(), Failure> {
    let body = call(endpoint, "GET", "/topics", None)?.json()?;
    if out.json_wanted(json) {
        return out.json(&body);
    }
    let topics = body.as_array().cloned().unwrap_or_default();
    let width = topics
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().len())
        .max()
        .unwrap_or(0)
        .max(5);
    out.line(&format!("{:width$}  PARTITIONS", "TOPIC"))?;
    for t in &topics {
        out.line(&format!(
            "{:width$}  {}",
            t["name"].as_str().unwrap_or_default(),
            t["partitions"]
        ))?;
    }
    Ok(())
}

/// Where each partition is read from next, and whether it is done (without --follow).
struct Cursor {
    partition: u32,
    offset: i64,
    done: bool,
}

fn consume(endpoint: &Endpoint, args: &ConsumeArgs, out: &mut Output) -> Result<(), Failure> {
    let topic_path = format!("/topics/{}", segment(&args.topic));
    let described = call(endpoint, "GET", &topic_path, None)?.json()?;
    let partitions: Vec<&Value> = described["partitions"]
        .as_array()
        .map(|p| p.iter().collect())
        .unwrap_or_default();
    let start_at_end = args.follow && !args.from_beginning;
    let mut cursors = Vec::new();
    for p in partitions {
        let partition = p["partition"].as_u64().unwrap_or(0) as u32;
        if args.partition.is_some_and(|wanted| wanted != partition) {
            continue;
        }
        let key = if start_at_end {
            "last_stable_offset"
        } else {
            "earliest_offset"
        };
        cursors.push(Cursor {
            partition,
            offset: p[key].as_i64().unwrap_or(0),
            done: false,
        });
    }
    if let Some(wanted) = args.partition {
        if cursors.is_empty() {
            return Err(Failure::runtime(format!(
                "Topic {} has no partition {wanted}",
                args.topic
            )));
        }
    }
    let mut printed: u64 = 0;
    let limit = args.max.unwrap_or(u64::MAX);
    if limit == 0 {
        return Ok(());
    }
    loop {
        let mut progressed = false;
        for cursor in cursors.iter_mut().filter(|c| !c.done) {
            let page = PAGE.min(limit - printed);
            let path = format!(
                "{topic_path}/partitions/{}/records?offset={}&max={page}",
                cursor.partition, cursor.offset
            );
            let body = call(endpoint, "GET", &path, None)?.json()?;
            let records = body["records"].as_array().cloned().unwrap_or_default();
            let next = body["next_offset"].as_i64().unwrap_or(cursor.offset);
            for record in records {
                let mut line = Map::new();
                line.insert("topic".into(), Value::String(args.topic.clone()));
                line.insert("partition".into(), json!(cursor.partition));
                if let Value::Object(fields) = record {
                    line.extend(fields);
                }
                out.json(&Value::Object(line))?;
                printed += 1;
                if printed >= limit {
                    return Ok(());
                }
            }
            if next > cursor.offset {
                progressed = true;
                cursor.offset = next;
            } else if !args.follow {
                cursor.done = true;
            }
        }
        if cursors.iter().all(|c| c.done) {
            return Ok(());
        }
        if !progressed {
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}
