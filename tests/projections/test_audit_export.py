"""`export`: a period's events as JSON Lines, amounts exact, each line re-verifiable with sha256 alone."""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from application.store.database import eventsourcing_env
from application.store.log import EVENTS_SCHEMA, LedgerLog
from projections.audit import export
from projections.audit_chain import AuditChain, AuditChainProjection
from projections.base.runner import ProjectionSpec
from tests.projections.audit_support import Flows, catch_up, new_ledger, own_database, query

CHAIN = (ProjectionSpec(AuditChainProjection, AuditChain),)


@pytest.fixture(scope="module")
def five_lives(database_url: str) -> Iterator[tuple[str, datetime, datetime]]:
    """Two customers' lives before `start`, two within (start, end], one after; all chained."""
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        flows = Flows(ledger)
        try:
            flows.lives(2)
            start = _instant()
            flows.lives(2)
            end = _instant()
            flows.lives(1)
        finally:
            ledger.close()
        catch_up(url, CHAIN)
        yield url, start, end


@pytest.fixture
def periods(
    database_url: str, five_lives: tuple[str, datetime, datetime]
) -> Iterator[tuple[str, datetime, datetime]]:
    """A copy of `five_lives` for one test."""
    template, start, end = five_lives
    with own_database(database_url, template=template) as url:
        yield url, start, end


def _instant() -> datetime:
    time.sleep(0.01)
    moment = datetime.now(UTC)
    time.sleep(0.01)
    return moment


def exported(url: str, start: datetime, end: datetime) -> list[dict]:
    out = io.StringIO()
    done = export(url, start, end, out)
    lines = out.getvalue().splitlines()
    assert done.lines == len(lines)
    return [json.loads(line, parse_float=Decimal) for line in lines]


def timestamps(url: str) -> list[tuple[int, datetime]]:
    log_app = LedgerLog(env=eventsourcing_env(url, EVENTS_SCHEMA))
    try:
        notifications = log_app.recorder.select_notifications(start=1, limit=100_000)
        return [(n.id, log_app.mapper.to_domain_event(n).timestamp) for n in notifications]
    finally:
        log_app.close()


def test_the_export_holds_exactly_the_events_of_the_period_in_notification_order(periods):
    url, start, end = periods
    lines = exported(url, start, end)
    expected = [n for n, at in timestamps(url) if start < at <= end]
    assert [line["notification_id"] for line in lines] == expected
    assert len(lines) > 20  # two customers' lives
    assert {line["data"].get("code") for line in lines if line["type"].endswith("Customer.Registered")} == {
        "c2",
        "c3",
    }
    for line in lines:
        assert start < datetime.fromisoformat(line["timestamp"]) <= end
        assert set(line) == {
            "notification_id",
            "aggregate_id",
            "version",
            "type",
            "timestamp",
            "actor",
            "data",
            "state",
            "event_hash",
            "previous_chain_hash",
            "chain_hash",
        }


def test_the_period_is_from_excluded_to_included_as_every_period_of_the_api(periods):
    url, _, _ = periods
    at = timestamps(url)[5][1]
    at_that_time = sorted(n for n, moment in timestamps(url) if moment == at)
    just_before, just_after = at - timedelta(microseconds=1), at + timedelta(microseconds=1)
    assert [line["notification_id"] for line in exported(url, just_before, at)] == at_that_time
    assert not {line["notification_id"] for line in exported(url, at, just_after)} & set(at_that_time)


def test_amounts_are_exact_json_numbers(periods):
    url, start, end = periods
    lines = exported(url, start, end)
    staged = [line for line in lines if line["type"].endswith("Transaction.Initiated")]
    assert len(staged) == 2
    for line in staged:
        stored = json.loads(line["state"])["order"]["quote"]
        quote = line["data"]["order"]["quote"]
        assert quote["crypto_amount"] == Decimal("0.00123457")
        for field in ("price", "crypto_amount", "fiat_value", "crypto_value"):
            assert isinstance(quote[field], Decimal)
            assert quote[field] == Decimal(stored[field])
        raw = next(
            text
            for text in _raw_lines(url, start, end)
            if f'"notification_id":{line["notification_id"]},' in text
        )
        assert '"crypto_amount":0.00123457' in raw


def _raw_lines(url: str, start: datetime, end: datetime) -> list[str]:
    out = io.StringIO()
    export(url, start, end, out)
    return out.getvalue().splitlines()


def test_each_line_is_reverified_with_sha256_alone(periods):
    url, start, end = periods
    lines = exported(url, start, end)
    for line in lines:
        canonical = (
            f"{line['notification_id']}\n{line['aggregate_id']}\n{line['version']}\n{line['type']}\n".encode()
            + line["state"].encode()
        )
        assert hashlib.sha256(canonical).hexdigest() == line["event_hash"]
        previous = bytes.fromhex(line["previous_chain_hash"])
        assert hashlib.sha256(previous + canonical).hexdigest() == line["chain_hash"]
    chain = {
        row["notification_id"]: row["chain_hash"] for row in query(url, "SELECT * FROM read.audit_chain")
    }
    assert all(chain[line["notification_id"]] == line["chain_hash"] for line in lines)


def test_an_event_altered_after_it_was_chained_no_longer_matches_its_exported_hashes(periods):
    url, start, end = periods
    victim = exported(url, start, end)[3]["notification_id"]
    query(
        url,
        "UPDATE ledger.ledger_events SET state = convert_to(replace(convert_from(state, 'UTF8'), "
        "'\"timestamp\"', '\"timestamp\" '), 'UTF8') WHERE notification_id = %s",
        victim,
    )
    [line] = [line for line in exported(url, start, end) if line["notification_id"] == victim]
    canonical = (
        f"{line['notification_id']}\n{line['aggregate_id']}\n{line['version']}\n{line['type']}\n".encode()
        + line["state"].encode()
    )
    assert hashlib.sha256(canonical).hexdigest() != line["event_hash"]


def test_events_not_chained_yet_are_exported_without_hashes(database_url):
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        Flows(ledger).lives(1)
        ledger.close()
        out = io.StringIO()
        done = export(url, datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC), out)
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert done.lines == done.unchained == len(lines) > 0
    assert all(line["chain_hash"] is None and line["event_hash"] is None for line in lines)
