"""The audit chain: every stored event linked by hash and checkpointed; a changed, deleted or inserted event,
or a changed link, is found by `check_chain` and named by notification id, aggregate, version and topic."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from projections import audit_chain
from projections.audit_chain import GENESIS, AuditChain, AuditChainProjection
from projections.audit_chain_check import check_chain
from projections.base.runner import ProjectionSpec
from tests.projections.audit_support import (
    Flows,
    catch_up,
    named_in,
    new_ledger,
    own_database,
    query,
    stored_event,
)

CHAIN = (ProjectionSpec(AuditChainProjection, AuditChain),)


@pytest.fixture(scope="module")
def three_lives(database_url: str) -> Iterator[str]:
    """A database whose log holds three customers' lives, all of it chained; each test gets a copy."""
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        try:
            Flows(ledger).lives(3)
        finally:
            ledger.close()
        catch_up(url, CHAIN)
        yield url


@pytest.fixture
def chained(database_url: str, three_lives: str) -> Iterator[str]:
    with own_database(database_url, template=three_lives) as url:
        yield url


def test_every_stored_event_is_linked_in_order_from_the_genesis_hash(chained):
    events = query(chained, "SELECT * FROM ledger.ledger_events ORDER BY notification_id")
    links = query(chained, "SELECT * FROM read.audit_chain ORDER BY notification_id")
    assert [link["notification_id"] for link in links] == [event["notification_id"] for event in events]
    previous = bytes.fromhex(GENESIS)
    for seq, (event, link) in enumerate(zip(events, links, strict=True), start=1):
        canonical = (
            f"{event['notification_id']}\n{event['originator_id']}\n{event['originator_version']}\n"
            f"{event['topic']}\n".encode()
            + bytes(event["state"])
        )
        assert link["seq"] == seq
        assert link["event_hash"] == hashlib.sha256(canonical).hexdigest()
        assert link["chain_hash"] == hashlib.sha256(previous + canonical).hexdigest()
        previous = bytes.fromhex(link["chain_hash"])


def test_checkpoints_are_kept_every_n_links_and_at_the_latest(database_url, monkeypatch):
    monkeypatch.setattr(audit_chain, "CHECKPOINT_EVERY", 7)
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        Flows(ledger).lives(2)
        ledger.close()
        head = catch_up(url, CHAIN)
        checkpoints = query(url, "SELECT * FROM read.audit_checkpoints ORDER BY seq")
        links = {row["seq"]: row for row in query(url, "SELECT * FROM read.audit_chain")}
        periodic = [row["seq"] for row in checkpoints if row["periodic"]]
        assert periodic == list(range(7, len(links) + 1, 7))
        assert checkpoints[-1]["notification_id"] == head
        assert sum(not row["periodic"] for row in checkpoints) == (0 if len(links) % 7 == 0 else 1)
        for row in checkpoints:
            assert row["chain_hash"] == links[row["seq"]]["chain_hash"]
        assert check_chain(url).status == "OK"


def test_the_chain_of_an_untouched_log_verifies(chained):
    check = check_chain(chained)
    assert check.status == "OK", check.details
    count = query(chained, "SELECT count(*) AS n FROM ledger.ledger_events")[0]["n"]
    assert f"{count} events re-hashed" in check.details[0]


def test_an_event_whose_stored_state_was_altered_is_named(chained):
    victim = stored_event(chained, "Customer.Registered", nth=1)
    query(
        chained,
        "UPDATE ledger.ledger_events SET state = convert_to(replace(convert_from(state, 'UTF8'), "
        "'\"Basic\"', '\"Plus\"'), 'UTF8') WHERE notification_id = %s",
        victim["notification_id"],
    )
    check = check_chain(chained)
    assert check.status == "FAILED"
    assert check.details[0].startswith("first mismatch: ")
    assert named_in(check.details[0], victim)
    assert "altered" in check.details[0]


def test_a_deleted_event_is_named(chained):
    victim = stored_event(chained, "Transaction.Committed")
    query(chained, "DELETE FROM ledger.ledger_events WHERE notification_id = %s", victim["notification_id"])
    check = check_chain(chained)
    assert check.status == "FAILED"
    assert named_in(check.details[0], victim)
    assert "deleted" in check.details[0]


def test_the_deleted_head_of_the_log_is_named(chained):
    victim = query(chained, "SELECT * FROM ledger.ledger_events ORDER BY notification_id DESC LIMIT 1")[0]
    query(chained, "DELETE FROM ledger.ledger_events WHERE notification_id = %s", victim["notification_id"])
    check = check_chain(chained)
    assert check.status == "FAILED"
    assert named_in(check.details[0], victim)


def test_an_event_moved_to_another_aggregate_version_is_named(chained):
    victim = stored_event(chained, "Transaction.PaidOut")
    query(
        chained,
        "UPDATE ledger.ledger_events SET originator_version = originator_version + 100 "
        "WHERE notification_id = %s",
        victim["notification_id"],
    )
    check = check_chain(chained)
    assert check.status == "FAILED"
    assert named_in(check.details[0], victim)
    assert f"version {victim['originator_version'] + 100}" in check.details[0]


def test_an_event_inserted_behind_the_head_of_the_chain_is_named(chained):
    victim = stored_event(chained, "Transaction.Committed")
    query(chained, "DELETE FROM read.audit_chain WHERE notification_id = %s", victim["notification_id"])
    check = check_chain(chained)
    assert check.status == "FAILED"
    assert named_in(check.details[0], victim)
    assert "not in the chain" in check.details[0]


def test_a_rewritten_link_of_the_chain_is_found(chained):
    victim = stored_event(chained, "Account.Opened")
    query(
        chained,
        "UPDATE read.audit_chain SET chain_hash = md5('x') || md5('y') WHERE notification_id = %s",
        victim["notification_id"],
    )
    check = check_chain(chained)
    assert check.status == "FAILED"
    assert named_in(check.details[0], victim)
    assert "does not follow from the previous link" in check.details[0]


def test_a_chain_hash_kept_by_the_auditor_must_still_be_reached(chained):
    head = query(
        chained, "SELECT notification_id, chain_hash FROM read.audit_chain ORDER BY seq DESC LIMIT 1"
    )
    kept = (head[0]["notification_id"], head[0]["chain_hash"])
    assert check_chain(chained, expected=[kept]).status == "OK"
    victim = stored_event(chained, "LimitWindow.Reserved")
    query(chained, "DELETE FROM ledger.ledger_events WHERE notification_id = %s", victim["notification_id"])
    # the intruder also rewrites the chain and its checkpoints from the tampered log
    query(chained, "TRUNCATE read.audit_chain, read.audit_checkpoints, read.auditchain_tracking")
    catch_up(chained, CHAIN)
    assert check_chain(chained).status == "OK"
    check = check_chain(chained, expected=[kept])
    assert check.status == "FAILED"
    assert f"expected hash at notification {kept[0]} differs" in check.details[0]


def test_events_after_the_head_of_the_chain_are_counted_not_judged(chained):
    ledger = new_ledger(chained)
    Flows(ledger, prefix="d").lives(1)
    ledger.close()
    check = check_chain(chained)
    assert check.status == "OK", check.details
    assert "events after notification" in check.details[-1]
