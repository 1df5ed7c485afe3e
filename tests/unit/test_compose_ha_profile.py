"""compose.yaml's `ha` profile (docs/high-availability.md): the Patroni topology for production-like use, kept
out of the plain `docker compose up`, with the settings the failover tests run under (no Docker engine runs
here: the file and docker/patroni's configuration are checked as data)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[2]
HA_SERVICES = {"etcd", "pg1", "pg2", "pg3", "api-ha", "projections-ha"}
NODES = ("pg1", "pg2", "pg3")


def services() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]


def patroni_config() -> dict:
    return yaml.safe_load((ROOT / "docker/patroni/patroni.yml").read_text())


def test_the_ha_services_run_only_in_their_profile_and_the_others_in_none() -> None:
    found = services()
    assert {name for name, service in found.items() if service.get("profiles") == ["ha"]} == HA_SERVICES
    assert all("profiles" not in service for name, service in found.items() if name not in HA_SERVICES)


def test_the_service_writes_through_a_multi_host_url_to_the_primary_and_reads_from_standbys() -> None:
    found = services()
    for name in ("api-ha", "projections-ha"):
        url = urlsplit(found[name]["environment"]["DATABASE_URL"])
        assert url.netloc.split("@")[1] == "pg1:5432,pg2:5432,pg3:5432", name
        assert parse_qs(url.query) == {"target_session_attrs": ["read-write"]}, name
        assert all(found[name]["depends_on"][node]["condition"] == "service_healthy" for node in NODES), name
    reads = urlsplit(found["api-ha"]["environment"]["BROKER_LEDGER_READ_DATABASE_URL"])
    assert reads.netloc.split("@")[1] == "pg1:5432,pg2:5432,pg3:5432"
    assert parse_qs(reads.query) == {
        "target_session_attrs": ["prefer-standby"],
        "load_balance_hosts": ["random"],
    }


def test_each_node_is_named_and_kept_on_its_own_volume_with_patronis_health_check() -> None:
    found = services()
    for node in NODES:
        service = found[node]
        assert service["environment"]["PATRONI_NAME"] == node
        assert service["volumes"] == [f"{node}-data:/var/lib/postgresql"]
        assert "8008/health" in service["healthcheck"]["test"][-1]
        assert service["restart"] == "unless-stopped"
    assert "--enable-v2=true" in found["etcd"]["command"]


def test_patroni_runs_synchronous_strict_with_rewind_on_etcds_v2_api() -> None:
    config = patroni_config()
    dcs = config["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] is True
    assert dcs["synchronous_mode_strict"] is True
    assert dcs["synchronous_node_count"] == 1
    assert dcs["postgresql"]["use_pg_rewind"] is True
    assert dcs["postgresql"]["parameters"]["synchronous_commit"] == "on"
    assert {key: dcs[key] for key in ("ttl", "loop_wait", "retry_timeout", "primary_start_timeout")} == {
        "ttl": 30,
        "loop_wait": 10,
        "retry_timeout": 10,
        "primary_start_timeout": 300,
    }
    assert "etcd" in config and "etcd3" not in config
    assert "data-checksums" in config["bootstrap"]["initdb"]
