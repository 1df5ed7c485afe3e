#!/bin/sh
# The image's entrypoint (docker/patroni/Dockerfile): `patroni` (the default) runs one database node,
# `etcd ARGS...` the store, anything else runs as given. Starts as root only to hand the volume to the user
# the process runs as (a fresh volume belongs to root), then drops to that user.
set -eu

case "${1:-patroni}" in
    patroni)
        : "${PATRONI_NAME:?set PATRONI_NAME, the node's name (its host name in compose.yaml)}"
        : "${PATRONI_ETCD_HOSTS:?set PATRONI_ETCD_HOSTS, e.g. etcd:2379 or etcd1:2379,etcd2:2379,etcd3:2379}"
        : "${PATRONI_SUPERUSER_PASSWORD:?set PATRONI_SUPERUSER_PASSWORD}"
        : "${PATRONI_REPLICATION_PASSWORD:?set PATRONI_REPLICATION_PASSWORD}"
        : "${PATRONI_RESTAPI_USERNAME:=patroni}"
        : "${PATRONI_RESTAPI_PASSWORD:?set PATRONI_RESTAPI_PASSWORD (POST /switchover and the like)}"
        export PATRONI_RESTAPI_USERNAME
        : "${LEDGER_DB_PASSWORD:?set LEDGER_DB_PASSWORD, the service role ledger's password}"
        export PATRONI_RESTAPI_CONNECT_ADDRESS="${PATRONI_RESTAPI_CONNECT_ADDRESS:-$PATRONI_NAME:8008}"
        export PATRONI_POSTGRESQL_CONNECT_ADDRESS="${PATRONI_POSTGRESQL_CONNECT_ADDRESS:-$PATRONI_NAME:5432}"
        install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/15
        chown postgres:postgres /var/lib/postgresql
        install -d -o postgres -g postgres -m 2775 /var/run/postgresql
        shift || true
        exec setpriv --reuid=postgres --regid=postgres --init-groups \
            env HOME=/var/lib/postgresql /usr/bin/patroni /etc/patroni/patroni.yml "$@"
        ;;
    etcd)
        chown etcd:etcd /var/lib/etcd
        chmod 0700 /var/lib/etcd
        shift
        exec setpriv --reuid=etcd --regid=etcd --init-groups /usr/bin/etcd "$@"
        ;;
    *)
        exec "$@"
        ;;
esac
