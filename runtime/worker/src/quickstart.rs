//! `headwater quickstart`: from nothing to change events in a minute. Starts a throwaway
//! PostgreSQL with logical replication (the test harness's `PostgresServer`, so the same code
//! the test suite trusts), creates the sample shop schema (`config/sample/postgres.sql`),
//! starts a worker with the embedded log, registers the sample connector
//! (`config/connectors/postgres-cdc-source.json`, pointed at that server), shows the snapshot's
//! progress, writes a few rows and prints their events as they arrive, then keeps following
//! the topics until Ctrl-C.
//!
//! Invariants:
//! - everything lives in one temporary directory (the server's, the worker's data and log);
//!   on Ctrl-C, `--exit-after` or any error the worker is stopped and the server and directory
//!   are removed, unless `--keep`, which leaves both running and says how to stop them;
//! - the worker and the server run in their own process groups, so Ctrl-C reaches only this
//!   process, which then shuts them down in order (worker first, so its slot is released);
//! - without `--keep` the worker also gets a parent-death signal: a crash of this process
//!   never leaves it behind.

use std::io::{IsTerminal, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use headwater_tests::PostgresServer;
use serde_json::{json, Value};

use crate::cli::QuickstartArgs;
use crate::failure::Failure;
use crate::http::{segment, Endpoint};

/// The sample connector, as shipped in `config/connectors/`.
const SAMPLE_CONNECTOR: &str = include_str!("../../../config/connectors/postgres-cdc-source.json");
/// The sample schema, as shipped in `config/sample/`.
const SAMPLE_SQL: &str = include_str!("../../../config/sample/postgres.sql");
/// The sample connector's topics (after its RegexRouter), in display order.
const TOPICS: [&str; 3] = [
    "warehouse.customers",
    "warehouse.products",
    "warehouse.orders",
];
const CUSTOMERS: u64 = 100;
const PRODUCTS: u64 = 20;
const POLL: Duration = Duration::from_millis(200);

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Terminal styling: colours only when stdout is a terminal and `NO_COLOR` is unset.
struct Style {
    color: bool,
    tty: bool,
}

impl Style {
    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    fn op(&self, op: &str) -> String {
        let code = match op {
            "c" => "32",
            "u" => "33",
            "d" => "31",
            "r" => "34",
            _ => "35",
        };
        self.paint(code, &format!("{op:>2}"))
    }
}

/// Runs the quickstart.
pub fn run(args: &QuickstartArgs) -> Result<(), Failure> {
    // SAFETY: installing a handler that only stores to an atomic is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_interrupt as *const () as libc::sighandler_t,
        );
    }
    let tty = std::io::stdout().is_terminal();
    let style = Style {
        color: tty && std::env::var_os("NO_COLOR").is_none(),
        tty,
    };
    let root = tempfile::Builder::new()
        .prefix("headwater-quickstart-")
        .tempdir()
        .map_err(|e| Failure::runtime(format!("cannot create a temporary directory: {e}")))?;

    say(
        &style,
        "starting a throwaway PostgreSQL with wal_level=logical ...",
    );
    let pg = if args.keep {
        PostgresServer::start_detachable()
    } else {
        PostgresServer::start()
    }
    .map_err(|e| {
        Failure::runtime(format!(
            "cannot start PostgreSQL: {e} (the quickstart needs the PostgreSQL server binaries: scripts/install-deps, or apt-get install postgresql)"
        ))
    })?;
    let mut session = Session {
        pg: Some(pg),
        worker: None,
        root: Some(root),
        keep: args.keep,
    };
    let outcome = session.demo(args, &style);
    let cleanup = session.finish(&style, outcome.is_ok());
    outcome.and(cleanup)
}

/// What has been started, so that it can be stopped (or kept) in order.
struct Session {
    pg: Option<PostgresServer>,
    worker: Option<Child>,
    root: Option<tempfile::TempDir>,
    keep: bool,
}

impl Session {
    fn pg(&self) -> &PostgresServer {
        self.pg.as_ref().expect("the server runs until finish")
    }

    fn demo(&mut self, args: &QuickstartArgs, style: &Style) -> Result<(), Failure> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::runtime(format!("cannot start a runtime: {e}")))?;
        let sql = SAMPLE_SQL.replace("ORDER_ROWS", &args.rows.to_string());
        let pg = self.pg();
        runtime
            .block_on(async {
                pg.create_database("production").await?;
                let client = pg.connect("production").await?;
                client.batch_execute(&sql).await?;
                Ok::<_, headwater_tests::HarnessError>(())
            })
            .map_err(|e| Failure::runtime(format!("cannot create the sample schema: {e}")))?;
        say(
            style,
            &format!(
                "PostgreSQL on 127.0.0.1:{} (database production: {CUSTOMERS} customers, {PRODUCTS} products, {} orders)",
                pg.port(),
                args.rows
            ),
        );

        let root = self.root.as_ref().expect("root").path().to_path_buf();
        // Ports picked here may be taken by someone else before the worker binds them: then
        // (and only for ports we picked) try again with others.
        let mut attempt = 0;
        let (rest, kafka, endpoint) = loop {
            attempt += 1;
            let rest = pick_port(args.rest_port, 8083)?;
            let kafka = pick_port(args.kafka_port, 9092)?;
            let worker = start_worker(&root, rest, kafka, self.keep)?;
            self.worker = Some(worker);
            let endpoint = Endpoint::parse(&format!("http://{rest}"), None, None)?;
            match wait_for_worker(&endpoint, self.worker.as_mut().expect("worker"), &root) {
                Ok(()) => break (rest, kafka, endpoint),
                Err(_)
                    if attempt < 3
                        && args.rest_port.is_none()
                        && args.kafka_port.is_none()
                        && log_tail(&root).contains("Address already in use") =>
                {
                    if let Some(mut w) = self.worker.take() {
                        stop_child(&mut w);
                    }
                    let _ = std::fs::remove_dir_all(root.join("data"));
                }
                Err(e) => return Err(e),
            }
        };
        say(
            style,
            &format!(
                "worker up: REST http://{rest}, Kafka protocol {kafka}, data in {}",
                root.join("data").display()
            ),
        );

        let mut connector: Value = serde_json::from_str(SAMPLE_CONNECTOR)
            .map_err(|e| Failure::runtime(format!("the bundled sample connector: {e}")))?;
        let port = self.pg().port().to_string();
        connector["config"]["database.hostname"] = json!("127.0.0.1");
        connector["config"]["database.port"] = json!(port);
        connector["config"]["database.user"] = json!("postgres");
        let name = connector["name"]
            .as_str()
            .unwrap_or("postgres-cdc-source")
            .to_owned();
        let body = serde_json::to_vec(&connector).expect("JSON");
        let created = endpoint.request("POST", "/connectors", Some(&body))?;
        if !created.is_success() {
            return Err(created.error());
        }
        say(
            style,
            &format!("registered connector {name} (config/connectors/postgres-cdc-source.json)"),
        );

        let total = CUSTOMERS + PRODUCTS + args.rows;
        let started = Instant::now();
        let mut last_line = Instant::now() - Duration::from_secs(10);
        loop {
            if interrupted() {
                return Ok(());
            }
            check_worker(self.worker.as_mut().expect("worker"), &root)?;
            let read = snapshot_rows_read(&endpoint, &name)?
                .unwrap_or(0)
                .min(total);
            // In the log (durable); the task's own count runs a little ahead of it.
            let done = TOPICS
                .iter()
                .map(|t| topic_records(&endpoint, t))
                .sum::<u64>()
                .min(total);
            let line = format!(
                "  snapshot: {} / {} rows read, {} in the log",
                group(read.max(done)),
                group(total),
                group(done)
            );
            if style.tty {
                print!("\r{line} ({:.1} s)", started.elapsed().as_secs_f64());
                let _ = std::io::stdout().flush();
            } else if last_line.elapsed() >= Duration::from_secs(1) || done >= total {
                println!("{line}");
                last_line = Instant::now();
            }
            if done >= total {
                break;
            }
            std::thread::sleep(POLL);
        }
        if style.tty {
            println!();
        }
        say(
            style,
            &format!(
                "snapshot complete: {} rows in {:.1} s; now writing a few changes ...",
                group(total),
                started.elapsed().as_secs_f64()
            ),
        );

        let mut cursors: Vec<(String, u32, i64)> = Vec::new();
        for t in TOPICS {
            for (p, end) in partitions(&endpoint, t)? {
                cursors.push((t.to_owned(), p, end));
            }
        }
        let writes = [
            "INSERT INTO customers (name, email) VALUES ('Quinn Quickstart', 'quinn@example.com')",
            "INSERT INTO orders (customer_id, product_id, quantity, amount) VALUES ((SELECT max(id) FROM customers), 1, 2, 15.00)",
            "UPDATE orders SET status = 'paid' WHERE id = (SELECT max(id) FROM orders)",
            "UPDATE products SET price = price + 1 WHERE id = 1",
            "DELETE FROM orders WHERE id = (SELECT max(id) FROM orders)",
        ];
        let pg = self.pg();
        let client = runtime
            .block_on(pg.connect("production"))
            .map_err(|e| Failure::runtime(format!("cannot connect to PostgreSQL: {e}")))?;
        for sql in writes {
            println!("  {}", style.paint("2", &format!("SQL> {sql}")));
            runtime
                .block_on(client.batch_execute(sql))
                .map_err(|e| Failure::runtime(format!("{sql}: {e}")))?;
            let until = Instant::now() + Duration::from_millis(700);
            while Instant::now() < until && !interrupted() {
                follow(&endpoint, &mut cursors, style)?;
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let kport = kafka.port();
        let rport = rest.port();
        println!();
        say(style, "what next (the worker keeps running until Ctrl-C):");
        println!(
            "  write rows:    psql -h 127.0.0.1 -p {} -U postgres production",
            pg.port()
        );
        println!("  connectors:    curl -s http://127.0.0.1:{rport}/connectors/{name}/status");
        println!(
            "  read a topic:  headwater consume warehouse.orders --url http://127.0.0.1:{rport}"
        );
        println!(
            "  Kafka clients: kcat -b 127.0.0.1:{kport} -t warehouse.orders -C -e -o beginning"
        );
        println!("  worker log:    {}", root.join("worker.log").display());
        println!();
        say(style, "following warehouse.* (Ctrl-C to stop) ...");
        let deadline = args
            .exit_after
            .map(|s| Instant::now() + Duration::from_secs(s));
        while !interrupted() && deadline.is_none_or(|d| Instant::now() < d) {
            check_worker(self.worker.as_mut().expect("worker"), &root)?;
            follow(&endpoint, &mut cursors, style)?;
            std::thread::sleep(POLL);
        }
        Ok(())
    }

    /// Stops (or, with `--keep`, leaves) what was started.
    fn finish(&mut self, style: &Style, ok: bool) -> Result<(), Failure> {
        let root = self.root.take();
        if self.keep && ok {
            let worker_pid = self.worker.as_ref().map(Child::id);
            let (pg_dir, pg_pid) = self.pg.take().map(PostgresServer::keep).unzip();
            let dir = root.map(tempfile::TempDir::keep);
            say(style, "left running (--keep):");
            if let Some(pid) = worker_pid {
                println!("  worker pid {pid}");
            }
            if let Some(pid) = pg_pid {
                println!("  PostgreSQL pid {pid}");
            }
            let mut rm = String::new();
            for d in dir.iter().chain(pg_dir.iter()) {
                rm.push(' ');
                rm.push_str(&d.display().to_string());
            }
            println!(
                "  stop with:  kill {} {} && rm -rf{rm}",
                worker_pid.map(|p| p.to_string()).unwrap_or_default(),
                pg_pid.map(|p| p.to_string()).unwrap_or_default()
            );
            return Ok(());
        }
        say(
            style,
            "stopping the worker and PostgreSQL, removing their data ...",
        );
        if let Some(mut child) = self.worker.take() {
            stop_child(&mut child);
        }
        drop(self.pg.take());
        drop(root);
        Ok(())
    }
}

fn say(style: &Style, text: &str) {
    println!("{} {text}", style.paint("1;36", "==>"));
}

/// `1234567` as `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `wanted` if given, else `default` when free, else any free port (all on 127.0.0.1).
fn pick_port(wanted: Option<u16>, default: u16) -> Result<SocketAddr, Failure> {
    if let Some(p) = wanted {
        return Ok(SocketAddr::from(([127, 0, 0, 1], p)));
    }
    if TcpListener::bind(("127.0.0.1", default)).is_ok() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], default)));
    }
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Failure::runtime(format!("no free port on 127.0.0.1: {e}")))?;
    l.local_addr()
        .map_err(|e| Failure::runtime(format!("no free port on 127.0.0.1: {e}")))
}

fn start_worker(
    root: &Path,
    rest: SocketAddr,
    kafka: SocketAddr,
    keep: bool,
) -> Result<Child, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::runtime(format!("cannot find the headwater binary: {e}")))?;
    let log = std::fs::File::create(root.join("worker.log"))
        .map_err(|e| Failure::runtime(format!("cannot create the worker log: {e}")))?;
    let err = log
        .try_clone()
        .map_err(|e| Failure::runtime(format!("cannot create the worker log: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("worker")
        .arg("--data-dir")
        .arg(root.join("data"))
        .arg("--rest-listen")
        .arg(rest.to_string())
        .arg("--kafka-listen")
        .arg(kafka.to_string())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0);
    // The throwaway worker is reached over plain HTTP on localhost without credentials: the
    // user's worker settings (a config file, TLS, REST credentials) are not for it.
    for variable in [
        "HEADWATER_CONFIG",
        "HEADWATER_REST_AUTH_TOKEN",
        "HEADWATER_REST_AUTH_USERS",
        "HEADWATER_REST_TLS_CERT",
        "HEADWATER_REST_TLS_KEY",
        "HEADWATER_KAFKA_TLS_CERT",
        "HEADWATER_KAFKA_TLS_KEY",
        "HEADWATER_KAFKA_TLS_CLIENT_CA",
        "HEADWATER_KAFKA_ADVERTISED_ADDRESS",
        "HEADWATER_KAFKA_SASL_USERS",
        "HEADWATER_KAFKA_SASL_MECHANISMS",
    ] {
        cmd.env_remove(variable);
    }
    if !keep {
        // SAFETY: the closure only calls prctl, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGTERM as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.spawn()
        .map_err(|e| Failure::runtime(format!("cannot start the worker: {e}")))
}

fn log_tail(root: &Path) -> String {
    let text = std::fs::read_to_string(root.join("worker.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

fn check_worker(child: &mut Child, root: &Path) -> Result<(), Failure> {
    if let Ok(Some(status)) = child.try_wait() {
        return Err(Failure::runtime(format!(
            "the worker exited ({status}); its log ends with:\n{}",
            log_tail(root)
        )));
    }
    Ok(())
}

fn wait_for_worker(endpoint: &Endpoint, child: &mut Child, root: &Path) -> Result<(), Failure> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        check_worker(child, root)?;
        if endpoint
            .request("GET", "/", None)
            .is_ok_and(|r| r.is_success())
        {
            return Ok(());
        }
        if Instant::now() > deadline || interrupted() {
            return Err(Failure::runtime(format!(
                "the worker did not answer within 30 s; its log ends with:\n{}",
                log_tail(root)
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stop_child(child: &mut Child) {
    // SAFETY: signalling our own child by pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The rows the connector's snapshot has read so far (its task status's `snapshot` member);
/// fails when the task failed (with its trace), so the user sees why.
fn snapshot_rows_read(endpoint: &Endpoint, name: &str) -> Result<Option<u64>, Failure> {
    let Ok(r) = endpoint.request(
        "GET",
        &format!("/connectors/{}/status", segment(name)),
        None,
    ) else {
        return Ok(None);
    };
    let Ok(status) = r.json() else {
        return Ok(None);
    };
    let mut read = None;
    for t in status["tasks"].as_array().into_iter().flatten() {
        if t["state"] == "FAILED" {
            return Err(Failure::runtime(format!(
                "the connector's task failed: {}",
                t["trace"].as_str().unwrap_or("(no trace)")
            )));
        }
        if let Some(rows) = t["snapshot"]["rows"].as_u64() {
            read = Some(read.unwrap_or(0) + rows);
        }
    }
    Ok(read)
}

/// `(partition, end offset)` of a topic (none while it does not exist yet).
fn partitions(endpoint: &Endpoint, topic: &str) -> Result<Vec<(u32, i64)>, Failure> {
    let r = endpoint.request("GET", &format!("/topics/{}", segment(topic)), None)?;
    if !r.is_success() {
        return Ok(Vec::new());
    }
    let body = r.json()?;
    Ok(body["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["partition"].as_u64().unwrap_or(0) as u32,
                p["last_stable_offset"].as_i64().unwrap_or(0),
            )
        })
        .collect())
}

/// Roughly how many records a topic holds (offsets; commit markers count too, so this may
/// run a little ahead near the end).
fn topic_records(endpoint: &Endpoint, topic: &str) -> u64 {
    let Ok(r) = endpoint.request("GET", &format!("/topics/{}", segment(topic)), None) else {
        return 0;
    };
    let Ok(body) = r.json() else { return 0 };
    body["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let end = p["last_stable_offset"].as_i64().unwrap_or(0);
            let start = p["earliest_offset"].as_i64().unwrap_or(0);
            u64::try_from(end - start).unwrap_or(0)
        })
        .sum()
}

/// Prints the records that arrived since the cursors, and advances them.
fn follow(
    endpoint: &Endpoint,
    cursors: &mut [(String, u32, i64)],
    style: &Style,
) -> Result<(), Failure> {
    for (topic, partition, offset) in cursors.iter_mut() {
        let path = format!(
            "/topics/{}/partitions/{partition}/records?offset={offset}&max=500",
            segment(topic)
        );
        let r = endpoint.request("GET", &path, None)?;
        if !r.is_success() {
            continue;
        }
        let body = r.json()?;
        for rec in body["records"].as_array().into_iter().flatten() {
            println!("{}", event_line(topic, rec, style));
        }
        if let Some(next) = body["next_offset"].as_i64() {
            *offset = next.max(*offset);
        }
    }
    Ok(())
}

/// One event as a line: operation, topic, key and the row after the change (a delete shows
/// its key only). Connect decimals (base64 of the unscaled bytes) are shown as numbers.
fn event_line(topic: &str, rec: &Value, style: &Style) -> String {
    let key = &rec["key"]["payload"];
    let key = if key.is_null() { &rec["key"] } else { key };
    let payload = &rec["value"]["payload"];
    let topic = style.paint("2", &format!("{topic:<20}"));
    if rec["value"].is_null() {
        return format!("{} {topic} {key}  (tombstone)", style.paint("2", " -"));
    }
    let op = payload["op"].as_str().unwrap_or("?");
    if op == "d" {
        return format!("{} {topic} {key}", style.op(op));
    }
    let mut row = payload["after"].clone();
    let row_schema = rec["value"]["schema"]["fields"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["field"] == "after"));
    if let (Some(fields), Some(values)) = (
        row_schema.and_then(|s| s["fields"].as_array()),
        row.as_object_mut(),
    ) {
        for f in fields {
            if f["name"] != "org.apache.kafka.connect.data.Decimal" {
                continue;
            }
            let scale = f["parameters"]["scale"]
                .as_str()
                .and_then(|s| s.parse::<i32>().ok())
                .unwrap_or(0);
            let Some(name) = f["field"].as_str() else {
                continue;
            };
            if let Some(Value::String(b64)) = values.get(name) {
                if let Ok(bytes) = BASE64.decode(b64) {
                    let text = headwater_api::logical::decimal::unscaled_to_string(&bytes, scale);
                    values.insert(name.to_owned(), Value::String(text));
                }
            }
        }
    }
    format!("{} {topic} {key}  {row}", style.op(op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(10_120), "10,120");
        assert_eq!(group(1_234_567), "1,234,567");
    }

    #[test]
    fn events_read_as_one_line() {
        let style = Style {
            color: false,
            tty: false,
        };
        let rec = json!({"key": {"payload": {"id": 7}}, "value": {"payload": {"op": "u", "after": {"id": 7, "status": "paid"}}}});
        assert_eq!(
            event_line("warehouse.orders", &rec, &style),
            r#" u warehouse.orders     {"id":7}  {"id":7,"status":"paid"}"#
        );
        let dec = json!({"key": {"payload": {"id": 7}}, "value": {
            "schema": {"fields": [{"field": "after", "fields": [{"field": "amount", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}]}]},
            "payload": {"op": "c", "after": {"amount": "Bdw="}}}});
        assert!(event_line("t", &dec, &style).ends_with(r#"{"amount":"15.00"}"#));
        let tomb = json!({"key": {"payload": {"id": 7}}, "value": null});
        assert!(event_line("warehouse.orders", &tomb, &style).ends_with("(tombstone)"));
    }

    #[test]
    fn the_bundled_connector_and_schema_parse() {
        let c: Value = serde_json::from_str(SAMPLE_CONNECTOR).unwrap();
        assert_eq!(
            c["config"]["connector.class"],
            "io.debezium.connector.postgresql.PostgresConnector"
        );
        assert!(SAMPLE_SQL.contains("ORDER_ROWS"));
    }
}
