"""compose.yaml is checked against the Compose Specification's JSON schema (no Docker engine runs here)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT.parent / "shared" / "schemas" / "compose-spec.json"


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_file_follows_the_compose_specification() -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(compose())


def test_every_service_has_a_health_check() -> None:
    services = compose()["services"]
    assert {name for name, service in services.items() if "healthcheck" in service} == set(services)


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
    assert services["projections"]["command"][-2:] == ["projections", "run"]
    assert services["projections"]["depends_on"]["postgres"]["condition"] == "service_healthy"
