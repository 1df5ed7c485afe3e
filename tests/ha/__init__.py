"""High availability: a PostgreSQL primary and two synchronous standbys under Patroni (see
tests/ha/cluster.py, scripts/ha-cluster and docs/high-availability.md)."""
