"""The operator's reserve adjustments as use cases of the `Ledger`, against PostgreSQL: each partner's
operator adjusts its own reserves only, and another partner's reserves, codes and trades are unknown to it."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from application.commands import AdjustmentRequest, BuyRequest, DepositReport, SellRequest, SendoutReport
from application.ledger import Ledger
from application.use_cases import UseCases
from domain.errors import (
    AssetUnknown,
    InsufficientReserve,
    ReserveAdjustmentConflict,
    ReserveAdjustmentShapeInvalid,
    ReserveCannotHoldAsset,
    ReserveTypeMismatch,
)
from domain.reserves import ReserveAdjustment, ReserveBook, ReservePlace, ReserveType
from tests.application.conftest import open_btc_account, race, register_active


def opening(
    code: str = "BTC", amount: str = "2", to: str = "hot-wallet", kind: str = "HotWallet"
) -> AdjustmentRequest:
    return AdjustmentRequest("OpeningBalance", code, Decimal(amount), to, kind)


def move(
    to: str = "cold-1",
    to_type: str = "ColdStore",
    amount: str = "1",
    source: str = "hot-wallet",
    source_type: str = "HotWallet",
) -> AdjustmentRequest:
    return AdjustmentRequest("Move", "BTC", Decimal(amount), to, to_type, source, source_type, "to cold")


def test_an_opening_balance_is_recorded_under_its_code(ledger: Ledger, use_cases: UseCases) -> None:
    recorded = use_cases.reserves.record_adjustment("demo", opening(), "RA-OPEN-1")
    stored = ledger.repository.get(ReserveAdjustment.create_id("demo", "RA-OPEN-1"))
    assert (stored.code, stored.kind, stored.asset_code, stored.amount) == (
        "RA-OPEN-1",
        "OpeningBalance",
        "BTC",
        Decimal(2),
    )
    assert stored.__dict__ == recorded.__dict__


def test_the_same_request_under_the_same_code_records_once(ledger: Ledger, use_cases: UseCases) -> None:
    first = use_cases.reserves.record_adjustment("demo", opening(), "RA-1")
    head = ledger.recorder.max_notification_id()
    again = use_cases.reserves.record_adjustment("demo", opening(), "RA-1")
    assert again.id == first.id and again.version == first.version
    assert ledger.recorder.max_notification_id() == head


def test_another_request_under_a_used_code_is_refused(use_cases: UseCases) -> None:
    use_cases.reserves.record_adjustment("demo", opening(), "RA-1")
    with pytest.raises(ReserveAdjustmentConflict):
        use_cases.reserves.record_adjustment("demo", opening(amount="3"), "RA-1")


def test_without_a_code_each_request_is_a_new_adjustment(use_cases: UseCases) -> None:
    assert (
        use_cases.reserves.record_adjustment("demo", opening()).code
        != use_cases.reserves.record_adjustment("demo", opening()).code
    )


def test_a_move_names_its_new_reserve_which_keeps_its_type(ledger: Ledger, use_cases: UseCases) -> None:
    use_cases.reserves.record_adjustment("demo", opening())
    use_cases.reserves.record_adjustment("demo", move())
    place = ledger.repository.get(ReservePlace.create_id("demo", "cold-1"))
    assert place.type == ReserveType.COLD_STORE
    head = ledger.recorder.max_notification_id()
    with pytest.raises(ReserveTypeMismatch):
        use_cases.reserves.record_adjustment("demo", move(to_type="Exchange"))
    assert ledger.recorder.max_notification_id() == head
    use_cases.reserves.record_adjustment("demo", move(amount="0.5"))
    assert ledger.repository.get(ReservePlace.create_id("demo", "cold-1")).version == place.version


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (opening(code="XRP"), AssetUnknown),
        (opening(code="EUR", amount="10"), ReserveCannotHoldAsset),
        (opening(to="bank", kind="ColdStore"), ReserveTypeMismatch),
        (AdjustmentRequest("Move", "EUR", Decimal(1), "bank", "Exchange"), ReserveAdjustmentShapeInvalid),
        (AdjustmentRequest("Burn", "EUR", Decimal(1), "bank", "Exchange"), ReserveAdjustmentShapeInvalid),
    ],
)
def test_bad_adjustments_are_refused_and_record_nothing(
    ledger: Ledger, use_cases: UseCases, request_: AdjustmentRequest, error: type[Exception]
) -> None:
    head = ledger.recorder.max_notification_id()
    with pytest.raises(error):
        use_cases.reserves.record_adjustment("demo", request_, "RA-BAD")
    assert ledger.recorder.max_notification_id() == head
    assert use_cases.reserves.adjustment("demo", "RA-BAD") is None


def test_a_move_beyond_what_the_reserve_holds_is_refused_and_records_nothing(
    ledger: Ledger, use_cases: UseCases
) -> None:
    use_cases.reserves.record_adjustment("demo", opening(amount="2"))
    head = ledger.recorder.max_notification_id()
    with pytest.raises(InsufficientReserve) as refused:
        use_cases.reserves.record_adjustment("demo", move(amount="2.5"), "RA-TOO-MUCH")
    assert "reserve hot-wallet holds 2.00000000 BTC" in refused.value.detail
    assert "2.5 BTC" in refused.value.detail
    assert ledger.recorder.max_notification_id() == head
    assert use_cases.reserves.adjustment("demo", "RA-TOO-MUCH") is None
    assert use_cases.reserves.record_adjustment("demo", move(amount="2")).amount == Decimal(
        2
    )  # exactly what it holds
    with pytest.raises(InsufficientReserve):
        use_cases.reserves.record_adjustment("demo", move(amount="0.00000001"))


def test_a_reserve_never_named_holds_nothing_and_a_move_from_it_is_refused(use_cases: UseCases) -> None:
    with pytest.raises(InsufficientReserve, match=re.escape("reserve vault-9 holds 0.00000000 BTC")):
        use_cases.reserves.record_adjustment(
            "demo", move(source="vault-9", source_type="ColdStore", to="hot-wallet", to_type="HotWallet")
        )


def test_moves_count_what_earlier_moves_brought_in_and_took_out(use_cases: UseCases) -> None:
    use_cases.reserves.record_adjustment("demo", opening(amount="3"))
    use_cases.reserves.record_adjustment("demo", move(amount="2"))
    use_cases.reserves.record_adjustment(
        "demo", move(to="cold-2", amount="1.5", source="cold-1", source_type="ColdStore")
    )
    with pytest.raises(InsufficientReserve, match=re.escape("reserve cold-1 holds 0.50000000 BTC")):
        use_cases.reserves.record_adjustment(
            "demo", move(to="cold-2", amount="0.6", source="cold-1", source_type="ColdStore")
        )
    use_cases.reserves.record_adjustment(
        "demo",
        move(to="hot-wallet", to_type="HotWallet", source="cold-2", source_type="ColdStore", amount="1.5"),
    )
    with pytest.raises(InsufficientReserve, match=re.escape("reserve hot-wallet holds 2.50000000 BTC")):
        use_cases.reserves.record_adjustment("demo", move(amount="2.6"))


def test_the_trades_that_reach_the_hot_wallet_count_for_a_move_from_it(
    ledger: Ledger, use_cases: UseCases, addresses
) -> None:
    """A buy's sendout leaves the hot wallet without asking (it may go below zero); a later move sees it."""
    use_cases.reserves.record_adjustment("demo", opening(amount="1"))
    address = addresses.next()
    register_active(use_cases, "demo", "alice")
    open_btc_account(use_cases, "demo", "alice", address)
    request = BuyRequest("alice", "EUR", "BTC", Decimal("250"), address, "BANK_EUR_BUY")
    buy = use_cases.buys.create("demo", request, stage=False)
    confirmations = ledger.settings.cryptos["BTC"].required_confirmations
    use_cases.settlement.report_sendout("demo", SendoutReport(buy.code, "sendout-1", confirmations))
    quote = buy.order.quote
    left = Decimal(1) - quote.crypto_amount - quote.fees.network_crypto
    with pytest.raises(InsufficientReserve, match=re.escape(f"reserve hot-wallet holds {left} BTC")):
        use_cases.reserves.record_adjustment("demo", move(amount="1"))
    use_cases.reserves.record_adjustment("demo", move(amount=str(left)))
    book = ledger.repository.get(ReserveBook.create_id("demo", "BTC"))
    assert (book.held("hot-wallet"), book.held("cold-1")) == (left, Decimal(0))  # the last move: next time


def test_concurrent_moves_that_each_fit_but_not_together_never_overdraw(make_use_cases, pooled_env) -> None:
    use_cases = make_use_cases(pooled_env)
    use_cases.reserves.record_adjustment("demo", opening(amount="1"))
    threads = 12  # each moves 0.3 BTC: three fit in 1 BTC, four do not

    outcomes = race(
        threads, lambda i: use_cases.reserves.record_adjustment("demo", move(to=f"cold-{i}", amount="0.3"))
    )

    moved = [o for o in outcomes if isinstance(o, ReserveAdjustment)]
    refused = [o for o in outcomes if isinstance(o, InsufficientReserve)]
    assert len(moved) + len(refused) == threads, [o for o in outcomes if isinstance(o, Exception)]
    assert len(moved) == 3
    with pytest.raises(InsufficientReserve, match=re.escape("reserve hot-wallet holds 0.10000000 BTC")):
        use_cases.reserves.record_adjustment("demo", move(amount="0.2"))


def sell_completed_at_once(use_cases: UseCases, partner: str, customer: str, address: str) -> None:
    """A sell of 0.01 BTC whose confirmed payment completes it (the partner without Payouts: other)."""
    register_active(use_cases, partner, customer)
    account = open_btc_account(use_cases, partner, customer, address)
    request = SellRequest(
        customer, account.code, "EUR", "BTC", "BANK_EUR_SELL", crypto_amount=Decimal("0.01")
    )
    sell = use_cases.sells.create(partner, request)
    confirmations = use_cases.ledger.settings.cryptos["BTC"].required_confirmations
    paid = DepositReport("BTC", sell.order.destination_address, "in-1", Decimal("0.01"), confirmations)
    use_cases.settlement.report_deposit(partner, paid)


def test_another_partners_operator_cannot_move_a_partners_reserve(
    ledger: Ledger, use_cases: UseCases
) -> None:
    use_cases.reserves.record_adjustment("demo", opening(to="cold-1", kind="ColdStore", amount="1"))
    head = ledger.recorder.max_notification_id()

    def out_of(source: str) -> str:
        request = move(to="hot-wallet", to_type="HotWallet", source=source, source_type="ColdStore")
        with pytest.raises(InsufficientReserve) as refused:
            use_cases.reserves.record_adjustment("other", request)
        return refused.value.detail.replace(source, "<reserve>")

    assert "holds 0.00000000 BTC" in out_of("cold-1")
    assert out_of("cold-1") == out_of("vault-9")  # the same answer as for a reserve never named
    assert ledger.recorder.max_notification_id() == head
    request = move(to="hot-wallet", to_type="HotWallet", source="cold-1", source_type="ColdStore")
    assert use_cases.reserves.record_adjustment("demo", request).partner == "demo"


def test_a_partners_reserve_name_and_adjustment_code_are_unknown_to_another_partner(
    ledger: Ledger, use_cases: UseCases
) -> None:
    demo = use_cases.reserves.record_adjustment("demo", opening(to="cold-1", kind="ColdStore"), "RA-SAME")
    other = use_cases.reserves.record_adjustment(
        "other", opening(to="cold-1", kind="Exchange", code="EUR"), "RA-SAME"
    )
    assert (demo.partner, other.partner) == ("demo", "other")
    assert demo.id != other.id
    assert use_cases.reserves.adjustment("demo", "RA-SAME").to.type == ReserveType.COLD_STORE
    assert use_cases.reserves.adjustment("other", "RA-SAME").to.type == ReserveType.EXCHANGE
    assert use_cases.reserves.adjustment("other", demo.code).asset_code == "EUR"  # its own, not demo's
    assert ledger.repository.get(ReservePlace.create_id("other", "cold-1")).type == ReserveType.EXCHANGE
    with pytest.raises(ReserveTypeMismatch):
        use_cases.reserves.record_adjustment("demo", opening(to="cold-1", kind="Exchange", code="EUR"))


def test_another_partners_trades_do_not_count_for_a_partners_move(
    ledger: Ledger, use_cases: UseCases, addresses
) -> None:
    use_cases.reserves.record_adjustment("demo", opening(amount="1"))
    sell_completed_at_once(use_cases, "other", "bob", addresses.next())
    with pytest.raises(InsufficientReserve, match=re.escape("reserve hot-wallet holds 1.00000000 BTC")):
        use_cases.reserves.record_adjustment("demo", move(amount="1.005"))
    with pytest.raises(InsufficientReserve, match=re.escape("reserve hot-wallet holds 0.01000000 BTC")):
        use_cases.reserves.record_adjustment("other", move(amount="0.02"))
    use_cases.reserves.record_adjustment("other", move(amount="0.01"))
    book = ledger.repository.get(ReserveBook.create_id("other", "BTC"))
    assert book.held("hot-wallet") == Decimal("0.01")
    assert ledger.store.find(ReserveBook.create_id("demo", "BTC")) is None
