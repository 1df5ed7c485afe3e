"""The environment, read once at start (`interface.environment`): every variable's default and meaning; and
the PG* variables written into the service's URL, as eventsourcing's settings used to take them."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from application.settings import DEFAULT_SETTINGS
from application.store.database import LibpqDefaults, eventsourcing_env, parse_qsl_params
from interface.environment import Environment
from projections.callbacks.delivery_config import DeliveryConfig


def test_an_empty_environment_gives_every_default() -> None:
    environment = Environment.read({})
    assert environment.settings_file == DEFAULT_SETTINGS
    assert environment.var_dir == Path("var")
    assert environment.token_key is None
    assert environment.database_url == ""
    assert environment.libpq == LibpqDefaults()
    assert environment.connections == 8
    assert environment.group_commit and environment.run_projections
    assert environment.projection_page == 500
    assert environment.stall_seconds == 30.0
    assert environment.expiry_sweep_seconds == 15.0
    assert environment.delivery == DeliveryConfig()
    assert environment.metrics_dir is None and environment.supervisor_pid is None


def test_every_variable_sets_its_field() -> None:
    environment = Environment.read(
        {
            "BROKER_LEDGER_SETTINGS": "/etc/ledger.toml",
            "BROKER_LEDGER_VAR": "/srv/var",
            "BROKER_LEDGER_TOKEN_KEY": "a2V5",
            "DATABASE_URL": " postgresql://u@h/d ",
            "PGHOST": "db",
            "PGPASSWORD": "pw",
            "BROKER_LEDGER_DB_CONNECTIONS": "10",
            "BROKER_LEDGER_GROUP_COMMIT": " Off ",
            "BROKER_LEDGER_PROJECTIONS": "off",
            "BROKER_LEDGER_PROJECTION_PAGE": "10",
            "BROKER_LEDGER_PROJECTION_STALL_SECONDS": "0",
            "BROKER_LEDGER_EXPIRY_SWEEP_SECONDS": "0.5",
            "BROKER_LEDGER_CALLBACK_SENDERS": "2",
            "PROMETHEUS_MULTIPROC_DIR": "/srv/var/metrics",
            "BROKER_LEDGER_SUPERVISOR_PID": "42",
        }
    )
    assert environment.settings_file == Path("/etc/ledger.toml")
    assert environment.var_dir == Path("/srv/var")
    assert environment.token_key == "a2V5"
    assert environment.database_url == "postgresql://u@h/d"
    assert environment.libpq == LibpqDefaults(host="db", password="pw")
    assert environment.connections == 10
    assert not environment.group_commit and not environment.run_projections
    assert environment.projection_page == 10
    assert environment.stall_seconds == 0.0
    assert environment.expiry_sweep_seconds == 0.5
    assert environment.delivery == DeliveryConfig(senders=2)
    assert environment.metrics_dir == "/srv/var/metrics"
    assert environment.supervisor_pid == 42


def test_empty_values_count_as_unset() -> None:
    names = [
        "BROKER_LEDGER_SETTINGS",
        "BROKER_LEDGER_VAR",
        "BROKER_LEDGER_TOKEN_KEY",
        "DATABASE_URL",
        "PGUSER",
    ]
    names += ["BROKER_LEDGER_DB_CONNECTIONS", "BROKER_LEDGER_PROJECTION_PAGE", "PROMETHEUS_MULTIPROC_DIR"]
    names += ["BROKER_LEDGER_PROJECTION_STALL_SECONDS", "BROKER_LEDGER_SUPERVISOR_PID"]
    assert Environment.read(dict.fromkeys(names, "")) == Environment.read({})


@pytest.mark.parametrize(
    "name, value",
    [
        ("BROKER_LEDGER_DB_CONNECTIONS", "3"),
        ("BROKER_LEDGER_PROJECTION_PAGE", "many"),
        ("BROKER_LEDGER_PROJECTION_STALL_SECONDS", "soon"),
        ("BROKER_LEDGER_EXPIRY_SWEEP_SECONDS", ""),
    ],
)
def test_a_value_that_cannot_be_used_is_refused_naming_its_variable(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        Environment.read({name: value})


def test_the_secrets_are_left_out_of_its_text() -> None:
    environment = Environment.read(
        {
            "BROKER_LEDGER_TOKEN_KEY": "the-key",
            "DATABASE_URL": "postgresql://u:the-pw@h/d",
            "PGPASSWORD": "pg-pw",
        }
    )
    text = repr(environment)
    assert "the-key" not in text and "the-pw" not in text and "pg-pw" not in text


def test_the_pg_variables_fill_only_the_parts_a_url_leaves_out() -> None:
    defaults = LibpqDefaults(user="pguser", dbname="pgdb", host="pghost", port="6000", password="pgpw")
    completed = defaults.complete("postgresql://broker@db.example/ledger")
    env = eventsourcing_env(completed, "s")
    assert (env["POSTGRES_USER"], env["POSTGRES_DBNAME"]) == ("broker", "ledger")
    assert env["POSTGRES_HOST"] == "db.example"
    assert (env["POSTGRES_PORT"], env["POSTGRES_PASSWORD"]) == ("6000", "pgpw")
    socket = LibpqDefaults(user="pguser").complete("postgresql://:@/?host=/run/pg")
    assert eventsourcing_env(socket, "s")["POSTGRES_DBNAME"] == "pguser"  # libpq's: the user's name


def test_a_url_with_nothing_to_add_is_kept_as_it_is() -> None:
    url = "host=h dbname=d user=u connect_timeout=7"
    assert LibpqDefaults().complete(url) == url
    assert LibpqDefaults(host="other").complete(url) == url


def test_a_url_without_a_connect_timeout_gets_three_seconds_or_pgconnect_timeout() -> None:
    params = conninfo_to_dict(LibpqDefaults().complete("host=h dbname=d user=u"))
    assert params["connect_timeout"] == "3"
    environment = Environment.read({"PGCONNECT_TIMEOUT": "9"})
    assert conninfo_to_dict(environment.libpq.complete("host=h"))["connect_timeout"] == "9"


def test_a_multi_host_url_reaches_the_event_stores_pool_with_its_session_attributes() -> None:
    url = "postgresql://u@h1:5001,h2:5002/d?target_session_attrs=read-write&sslmode=prefer"
    env = eventsourcing_env(LibpqDefaults().complete(url), "s")
    assert (env["POSTGRES_HOST"], env["POSTGRES_PORT"]) == ("h1,h2", "5001,5002")
    assert parse_qsl_params(env["POSTGRES_LIBPQ_PARAMS"]) == {
        "target_session_attrs": "read-write",
        "sslmode": "prefer",
        "connect_timeout": "3",
    }
