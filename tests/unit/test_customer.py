"""The customer's rules, its deterministic ids, and the account codes that derive from an address."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.account import Account, account_code_for
from domain.customer import Customer, CustomerStatus
from domain.errors import InvalidStateTransition
from domain.ids import business_id
from domain.limits import LimitWindow
from domain.transaction import Transaction
from tests.unit.builders import LATER, NOW, assert_nothing_recorded, assert_refused, store


def customer(status: str = CustomerStatus.NEW, partner: str = "partner-a") -> Customer:
    return Customer(
        partner=partner,
        code="CUST1",
        trust_level="basic",
        status=status,
        currency="EUR",
        portfolio=None,
        at=NOW,
    )


def test_a_new_customer_is_not_active() -> None:
    new = customer()
    assert new.status == CustomerStatus.NEW
    assert not new.is_active
    assert new.account_codes == []
    assert (new.created, new.updated) == (NOW, NOW)


def test_a_customer_can_be_created_active() -> None:
    assert customer(CustomerStatus.ACTIVE).is_active


def test_a_new_customer_can_be_activated() -> None:
    new = customer()
    new.activate(LATER)
    assert new.status == CustomerStatus.ACTIVE
    assert new.is_active
    assert new.updated == LATER
    assert new.version == 2


def test_activating_an_active_customer_twice_is_harmless() -> None:
    active = customer()
    active.activate(LATER)
    assert_nothing_recorded(active, lambda: active.activate(LATER + timedelta(hours=1)))
    assert active.version == 2


def test_a_customer_in_another_status_cannot_be_activated() -> None:
    odd = customer(status="BLOCKED")
    assert_refused(odd, InvalidStateTransition, lambda: odd.activate(LATER))


def test_an_account_is_linked_to_a_customer_once() -> None:
    owner = customer()
    owner.link_account("AC1", LATER)
    owner.link_account("AC2", LATER)
    assert_nothing_recorded(owner, lambda: owner.link_account("AC1", LATER))
    assert owner.account_codes == ["AC1", "AC2"]


def test_a_customer_reloaded_from_the_store_equals_the_one_in_memory() -> None:
    events = store()
    owner = customer()
    owner.activate(LATER)
    owner.link_account("AC1", LATER)
    events.save(owner)
    reloaded = events.repository.get(owner.id)
    assert reloaded.__dict__ == owner.__dict__


def test_customer_ids_are_deterministic() -> None:
    assert customer().id == Customer.create_id("partner-a", "CUST1")
    assert Customer.create_id("partner-a", "CUST1") == Customer.create_id("partner-a", "CUST1")


def test_deterministic_ids_differ_per_partner() -> None:
    assert customer(partner="partner-a").id != customer(partner="partner-b").id
    assert Account.create_id("partner-a", "AC1") != Account.create_id("partner-b", "AC1")
    assert Transaction.create_id("partner-a", "T1") != Transaction.create_id("partner-b", "T1")
    window = LimitWindow.create_id
    assert window("partner-a", "C", "buy", "2026-11") != window("partner-b", "C", "buy", "2026-11")


def test_deterministic_ids_differ_per_kind_of_aggregate_for_the_same_key() -> None:
    ids = {
        Customer.create_id("partner-a", "X1"),
        Account.create_id("partner-a", "X1"),
        Transaction.create_id("partner-a", "X1"),
    }
    assert len(ids) == 3


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("partner-a", "ab"), ("partner-a", "a", "b")),
        (("partner-a", "CUST1"), ("partner-aCUST1",)),
    ],
)
def test_business_ids_of_different_keys_differ(first: tuple[str, ...], second: tuple[str, ...]) -> None:
    assert business_id("customer", *first) != business_id("customer", *second)


def test_the_same_withdraw_address_names_the_same_account() -> None:
    code = account_code_for("partner-a", "CUST1", "BTC", "bc1qexample")
    assert code == account_code_for("partner-a", "CUST1", "BTC", "bc1qexample")
    assert code.startswith("AC")
    assert len(code) == 20


@pytest.mark.parametrize(
    "other",
    [
        ("partner-b", "CUST1", "BTC", "bc1qexample"),
        ("partner-a", "CUST2", "BTC", "bc1qexample"),
        ("partner-a", "CUST1", "LTC", "bc1qexample"),
        ("partner-a", "CUST1", "BTC", "bc1qother"),
    ],
)
def test_another_partner_customer_crypto_or_address_names_another_account(
    other: tuple[str, str, str, str],
) -> None:
    assert account_code_for(*other) != account_code_for("partner-a", "CUST1", "BTC", "bc1qexample")
