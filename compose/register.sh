#!/bin/sh
# One-shot registration of the sample connectors in config/connectors/ with the compose
# service names instead of 127.0.0.1 (the files as shipped target a local set-up).
# MariaDB is not in the compose stack (MySQL 8 is); its sample is left out.
set -eu
url="${HEADWATER_URL:-http://headwater:8083}"
for f in /connectors/postgres-cdc-source.json /connectors/mysql-cdc-source.json /connectors/mongodb-cdc-source.json; do
  name=$(basename "$f" .json)
  body=$(sed -e 's/"database.hostname": "127.0.0.1"/"database.hostname": "'"$(case $name in postgres*) echo postgres;; *) echo mysql;; esac)"'"/' \
             -e 's#mongodb://127.0.0.1:27017#mongodb://mongo:27017#' "$f")
  # PUT /connectors/<name>/config creates or updates, so re-running is harmless.
  config=$(printf '%s' "$body" | sed -n '/"config"/,$p' | sed '1s/.*"config": *//' | sed '$d')
  code=$(printf '%s' "$config" | curl -s -o /tmp/out -w '%{http_code}' -X PUT -H 'Content-Type: application/json' --data-binary @- "$url/connectors/$name/config")
  echo "$name: HTTP $code $(cat /tmp/out)"
  case $code in 2*) ;; *) exit 1;; esac
done
