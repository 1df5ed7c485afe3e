"""compose.yaml is checked against the Compose Specification's JSON schema (no Docker engine runs here)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from application.store.database import DEFAULT_CONNECTIONS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"  # vendored: see tests/data/README.md


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_file_follows_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(compose())


def test_every_service_has_a_health_check() -> None:
    services = compose()["services"]
    assert {name for name, service in services.items() if "healthcheck" in service} == set(services)


def test_the_api_containers_check_liveness_as_they_run_no_projections() -> None:
    api = compose()["services"]["api"]
    assert "--no-projections" in api["command"]
    probe = api["healthcheck"]["test"][-1]
    assert "/health/live'" in probe


def test_the_api_waits_for_a_healthy_database() -> None:
    api = compose()["services"]["api"]
    assert api["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert api["environment"]["DATABASE_URL"].startswith("postgresql://")


def test_a_broken_compose_file_is_refused_by_the_schema() -> None:
    broken = compose()
    broken["services"]["api"]["healthcheck"]["interval"] = {"seconds": 10}
    schema = json.loads(SCHEMA.read_text())
    try:
        jsonschema.Draft7Validator(schema).validate(broken)
    except jsonschema.ValidationError:
        return
    raise AssertionError("the schema accepted an invalid health check interval")


def test_projections_run_in_their_own_workers_and_not_in_the_api() -> None:
    services = compose()["services"]
    assert "--no-projections" in services["api"]["command"]
    assert services["projections"]["command"][1:3] == ["projections", "run"]
    assert services["projections"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_deployment_fits_postgresqls_default_max_connections_with_room_to_spare() -> None:
    """README's formula: API workers x BROKER_LEDGER_DB_CONNECTIONS + projection runners x 2 (one for what
    a runner leads, one for a moment when it records a failure) + a few for CLI commands (the projections'
    health check among them), against max_connections 100 less the 3 reserved for superusers; a third of it
    stays free for operators, migrations and the analysts."""
    services = compose()["services"]
    api = services["api"]
    command = api["command"]
    workers = int(command[command.index("--workers") + 1])
    per_worker = int(api["environment"].get("BROKER_LEDGER_DB_CONNECTIONS", DEFAULT_CONNECTIONS))
    projections = services["projections"]
    runs = projections["command"]
    per_replica = int(runs[runs.index("--processes") + 1]) if "--processes" in runs else 1
    runners = projections.get("deploy", {}).get("replicas", 1) * per_replica
    cli_commands = 5
    needed = workers * per_worker + runners * 2 + cli_commands
    assert needed <= (100 - 3) * 2 // 3, f"compose.yaml needs {needed} connections"
