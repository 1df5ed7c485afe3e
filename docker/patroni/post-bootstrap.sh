#!/bin/sh
# Patroni's post_bootstrap (docker/patroni/patroni.yml): run once, on the node that initialised the cluster,
# with a connection string for its superuser as $1. Creates the service's role and database; the service
# creates its schemas itself when it starts. The role is no superuser: it owns its database, may create the
# analysts' roles (broker-ledger analyst ...) and reads the monitoring views (pg_monitor: replication state,
# the standbys' WAL positions).
set -eu

: "${LEDGER_DB_PASSWORD:?set LEDGER_DB_PASSWORD}"

psql "$1" -v ON_ERROR_STOP=1 -v password="$LEDGER_DB_PASSWORD" <<'SQL'
CREATE ROLE ledger LOGIN CREATEROLE PASSWORD :'password';
GRANT pg_monitor TO ledger;
CREATE DATABASE ledger OWNER ledger;
SQL
