#!/usr/bin/env bash
# The compose topology without Docker: PostgreSQL (wal_level=logical) and MariaDB (ROW binlog
# with full row metadata) from the local server binaries, loaded with the sample schemas of
# config/sample/, and a Headwater worker with the sample connectors of config/connectors/
# (PostgreSQL and MariaDB) registered.
#
#   compose/local.sh up      start everything (state in $HEADWATER_LOCAL_DIR)
#   compose/local.sh status  the connectors' states and the topics
#   compose/local.sh down    stop everything and remove the state directory
#   compose/local.sh smoke   up, check the snapshot and a live change from each database
#                            arrive as events, then down (what CI runs)
#
# Environment: HEADWATER_LOCAL_DIR (default /var/tmp/headwater-local), HEADWATER_BIN (default:
# `headwater` on the PATH, else the release build), PG_PORT (55432), MARIADB_PORT (53306),
# REST_PORT (58083), KAFKA_PORT (59092). Run as root or as a user that may run the servers;
# as root the servers run as the postgres and mysql accounts.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${HEADWATER_LOCAL_DIR:-/var/tmp/headwater-local}"
pg_port="${PG_PORT:-55432}"
my_port="${MARIADB_PORT:-53306}"
rest_port="${REST_PORT:-58083}"
kafka_port="${KAFKA_PORT:-59092}"
url="http://127.0.0.1:$rest_port"

log() { echo "==> $*"; }
die() { echo "compose/local.sh: $*" >&2; exit 1; }

headwater_bin() {
  if [ -n "${HEADWATER_BIN:-}" ]; then echo "$HEADWATER_BIN"; return; fi
  if command -v headwater >/dev/null 2>&1; then command -v headwater; return; fi
  local target
  target=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  [ -x "$target/release/headwater" ] || cargo build --release --locked -p headwater >&2
  echo "$target/release/headwater"
}

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$d" ] && [ -x "$d/initdb" ] || die "PostgreSQL server binaries not found (scripts/install-deps)"
  echo "$d"
}

# Runs a command as the given account when we are root, else as ourselves.
as_user() {
  local user=$1; shift
  if [ "$(id -u)" = 0 ]; then runuser -u "$user" -- "$@"; else "$@"; fi
}

wait_for() { # description, seconds, command...
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "timed out waiting for $what"
    sleep 0.3
  done
}

start_postgres() {
  local bin; bin=$(pg_bin)
  mkdir -p "$dir/postgres"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir/postgres"
  as_user postgres "$bin/initdb" -D "$dir/postgres/data" -U postgres --auth=trust -E UTF8 >"$dir/postgres/initdb.log" 2>&1 ||
    die "initdb failed: $(tail -n 5 "$dir/postgres/initdb.log")"
  as_user postgres "$bin/pg_ctl" -D "$dir/postgres/data" -l "$dir/postgres/postgres.log" -w start \
    -o "-c wal_level=logical -c max_replication_slots=10 -c max_wal_senders=10 -c port=$pg_port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir/postgres" >/dev/null ||
    die "PostgreSQL did not start: $(tail -n 5 "$dir/postgres/postgres.log")"
  "$bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -c "CREATE DATABASE production" postgres
  sed 's/ORDER_ROWS/1000/' config/sample/postgres.sql |
    "$bin/psql" -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres production >/dev/null
  log "PostgreSQL on 127.0.0.1:$pg_port (database production)"
}

mariadb_client() { mariadb --no-defaults --socket="$dir/mariadb/mariadb.sock" -uroot "$@"; }

start_mariadb() {
  local install daemon
  install=$(command -v mariadb-install-db || command -v mysql_install_db) || die "mariadb-install-db not found (scripts/install-deps)"
  daemon=$(command -v mariadbd || echo /usr/sbin/mariadbd)
  mkdir -p "$dir/mariadb"
  [ "$(id -u)" = 0 ] && chown mysql: "$dir/mariadb"
  as_user mysql "$install" --no-defaults --datadir="$dir/mariadb/data" --auth-root-authentication-method=socket \
    --skip-test-db >"$dir/mariadb/install.log" 2>&1 || die "mariadb-install-db failed: $(tail -n 5 "$dir/mariadb/install.log")"
  as_user mysql "$daemon" --no-defaults --datadir="$dir/mariadb/data" --port="$my_port" --bind-address=127.0.0.1 \
    --socket="$dir/mariadb/mariadb.sock" --pid-file="$dir/mariadb/mariadb.pid" --log-error="$dir/mariadb/mariadb.log" \
    --server-id=1 --log-bin=mariadb-bin --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL \
    >/dev/null 2>&1 &
  wait_for "MariaDB" 60 mariadb_client -e "SELECT 1"
  mariadb_client < config/sample/mysql.sql
  log "MariaDB on 127.0.0.1:$my_port (database inventory)"
}

start_worker() {
  local bin; bin=$(headwater_bin)
  mkdir -p "$dir/worker"
  "$bin" worker --data-dir "$dir/worker/data" --rest-listen "127.0.0.1:$rest_port" \
    --kafka-listen "127.0.0.1:$kafka_port" >"$dir/worker/worker.log" 2>&1 &
  echo $! >"$dir/worker/worker.pid"
  wait_for "the worker's REST API" 30 "$bin" connectors list --url "$url"
  log "worker: REST $url, Kafka protocol 127.0.0.1:$kafka_port ($bin)"
}

register() {
  local bin; bin=$(headwater_bin)
  mkdir -p "$dir/connectors"
  python3 - "$dir/connectors" "$pg_port" "$my_port" <<'PY'
import json, sys
out, pg_port, my_port = sys.argv[1], sys.argv[2], sys.argv[3]
for name, port in (("postgres-cdc-source", pg_port), ("mariadb-cdc-source", my_port)):
    with open(f"config/connectors/{name}.json") as f:
        c = json.load(f)
    c["config"]["database.port"] = port
    with open(f"{out}/{name}.json", "w") as f:
        json.dump(c, f, indent=2)
PY
  for f in "$dir"/connectors/*.json; do
    "$bin" connectors create "$f" --url "$url" >/dev/null
    log "registered $(basename "$f" .json)"
  done
}

up() {
  [ -e "$dir" ] && die "$dir exists: run compose/local.sh down first"
  mkdir -p "$dir"
  chmod 755 "$dir"
  start_postgres
  start_mariadb
  start_worker
  register
  log "up; compose/local.sh status shows the connectors, compose/local.sh down stops everything"
}

status() {
  local bin; bin=$(headwater_bin)
  for c in postgres-cdc-source mariadb-cdc-source; do
    "$bin" connectors status "$c" --url "$url" || true
  done
  "$bin" topics --url "$url" || true
}

down() {
  if [ -f "$dir/worker/worker.pid" ]; then
    local pid; pid=$(cat "$dir/worker/worker.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  if [ -d "$dir/postgres/data" ]; then
    as_user postgres "$(pg_bin)/pg_ctl" -D "$dir/postgres/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  if [ -f "$dir/mariadb/mariadb.pid" ]; then
    local pid; pid=$(cat "$dir/mariadb/mariadb.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
  log "down"
}

# Waits until `topic` holds a record whose JSON line contains `needle`.
wait_for_event() {
  local topic=$1 needle=$2 bin; bin=$(headwater_bin)
  local deadline=$((SECONDS + 60))
  until "$bin" consume "$topic" --url "$url" 2>/dev/null | grep -q -- "$needle"; do
    [ $SECONDS -lt $deadline ] || die "no event with $needle in $topic within 60 s (worker log: $(tail -n 5 "$dir/worker/worker.log"))"
    sleep 0.5
  done
}

count() { "$(headwater_bin)" consume "$1" --url "$url" 2>/dev/null | grep -c '"value"' || true; }

smoke() {
  trap down EXIT
  up
  log "waiting for the snapshots (1,000 orders from each database)"
  local deadline=$((SECONDS + 120))
  until [ "$(count warehouse.orders)" -ge 1000 ] && [ "$(count warehouse.mariadb_orders)" -ge 1000 ]; do
    [ $SECONDS -lt $deadline ] || die "snapshots incomplete: $(count warehouse.orders) and $(count warehouse.mariadb_orders) orders"
    sleep 1
  done
  "$(pg_bin)/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres production \
    -c "INSERT INTO customers (name, email) VALUES ('Smoke Test PG', 'smoke-pg@example.com')"
  mariadb_client inventory -e "INSERT INTO customers (name, email) VALUES ('Smoke Test MariaDB', 'smoke-mariadb@example.com')"
  wait_for_event warehouse.customers 'smoke-pg@example.com'
  log "PostgreSQL change arrived in warehouse.customers"
  wait_for_event warehouse.mariadb_customers 'smoke-mariadb@example.com'
  log "MariaDB change arrived in warehouse.mariadb_customers"
  status
  log "smoke test passed"
}

case "${1:-}" in
  up) up ;;
  status) status ;;
  down) down ;;
  smoke) smoke ;;
  *) echo "usage: compose/local.sh up|status|down|smoke" >&2; exit 2 ;;
esac
