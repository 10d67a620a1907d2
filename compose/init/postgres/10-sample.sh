#!/bin/sh
# Creates the sample shop schema (config/sample/postgres.sql) with 10,000 orders.
set -e
sed 's/ORDER_ROWS/10000/' /sample/postgres.sql | psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB"
