"""Every table, view and column of the read schema carries docs/analytics.md's text as its comment, and the
service's start writes only the comments that differ (`projections.comments`)."""

from __future__ import annotations

import threading

import psycopg
import pytest

from application.settings import load_settings
from interface.cli.main import main
from projections.analyst_schema import prepare, views_and_comments
from projections.comments import current_comments, describe, described
from projections.dimensions import Dimensions
from projections.read_models import CREATE_LOCK
from tests.projections.test_analytics_doc import open_every_projection, readable_tables


def test_the_guide_gives_a_comment_to_each_read_model_and_its_columns() -> None:
    guide = described()
    assert guide["transactions"].comment == "one current row per buy or sell"
    assert guide["transactions"].columns["crypto_price"] == "the executed price per unit, in currency_code"
    assert guide["transactions"].columns["transaction_code"] == "key"  # a row naming two columns names both
    assert guide["readmodels_tracking"].columns["notification_id"] == "the position of the last event applied"
    assert guide["audit_signing_keys"].columns["public_key"].startswith("the raw 32-byte public key")


def test_every_table_and_column_the_analyst_reads_has_the_guides_text_as_its_comment(
    cli_database: str, analyst_name: str
) -> None:
    open_every_projection(cli_database)
    with pytest.raises(SystemExit) as exit_:
        main(["analyst", "create-role", "--name", analyst_name, "--password", "pw"])
    assert exit_.value.code == 0
    guide = described()
    with psycopg.connect(cli_database) as conn:
        comments = current_comments(conn)
        readable = readable_tables(conn, analyst_name)
    assert {"transactions", "fee_revenue", "assets", "calendar", "monthly_volumes"} <= set(readable)
    uncommented = []
    for table, columns in readable.items():
        if table not in guide:
            uncommented.append(table)
            continue
        assert comments[(table, None)] == guide[table].comment, table
        for column in columns:
            if comments[(table, column)] != guide[table].columns.get(column):
                uncommented.append(f"{table}.{column}")
    assert uncommented == []


def test_a_start_that_finds_the_comments_in_place_writes_none_and_mends_one_that_differs(
    fresh_database: str,
) -> None:
    prepare(fresh_database, Dimensions.of(load_settings()))
    with psycopg.connect(fresh_database, autocommit=True) as conn:
        assert describe(conn) == 0
        conn.execute("COMMENT ON COLUMN read.transactions.crypto_price IS 'changed by hand'")
        assert describe(conn) == 1
        assert current_comments(conn)[("transactions", "crypto_price")] == (
            "the executed price per unit, in currency_code"
        )


def test_comments_wait_while_another_process_creates_the_read_models_views(fresh_database: str) -> None:
    dimensions = Dimensions.of(load_settings())
    prepare(fresh_database, dimensions)
    with psycopg.connect(fresh_database) as creating:  # as ReadModels' creation holds it, in a transaction
        creating.execute("SELECT pg_advisory_xact_lock(%s)", (CREATE_LOCK,))
        preparing = threading.Thread(target=views_and_comments, args=(fresh_database, dimensions))
        preparing.start()
        preparing.join(timeout=1.5)
        assert (
            preparing.is_alive()
        )  # waits for the views to be created, rather than commenting them meanwhile
    preparing.join(timeout=30)
    assert not preparing.is_alive()
