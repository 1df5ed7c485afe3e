"""A ledger driven through every kind of event: customers of two partners, buys and sells into every status,
cancellations, over two days. The projection tests replay it and compare the read models with it; the driver
of its use cases is bench/history.py's, which bench/rebuild.py uses too."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from application.commands import ResolutionRequest, SendoutReport
from application.ledger import Ledger
from application.use_cases import UseCases
from bench.history import Driver, Scenario
from domain.transaction import Resolution
from projections.base.runner import open_view, replay
from projections.catalog import READ_MODELS, by_name

__all__ = ["READ_MODELS", "populate"]


def populate(use_cases: UseCases, clock: Any, addresses: Any) -> Scenario:
    """Every status and event kind, for partners `demo` (with Payouts) and `other` (without)."""
    drive = Driver(use_cases, clock, addresses)
    drive.customer("demo", "alice", activate_later=True)
    drive.customer("demo", "bob")
    drive.customer("other", "alice")

    completed = drive.buy("demo", "alice", "100", payment_reference="ref-1", data={"desk": "web"})
    use_cases.buys.commit("demo", completed.code)
    drive.sendout(completed, 1)
    drive.sendout(completed, 2)
    drive.buy("demo", "alice", "50", stage=False)
    failed = drive.buy("demo", "bob", "75")
    use_cases.alternative.cancel_staged("demo", failed.code, "payment failed")

    paid = drive.sell("demo", "bob", "0.002")
    drive.deposit(paid, 1)
    drive.deposit(paid, 2)
    use_cases.settlement.confirm_payout("demo", paid.code, "payout-1", "IBAN-1")
    use_cases.settlement.pay_out("demo", paid.code)
    to_payout = drive.sell("demo", "alice", "0.001")
    drive.deposit(to_payout, 2)
    blocked = drive.sell("demo", "bob", "0.001")
    drive.deposit(blocked, 2, Decimal("0.0005"))
    completed_sell = drive.sell("other", "alice", "0.003")
    drive.deposit(completed_sell, 2)
    resolve(use_cases, drive)

    lapsing_buy = drive.buy("other", "alice", "20")
    lapsing_sell = drive.sell("demo", "alice", "0.0001")
    clock.advance(days=1)
    use_cases.settlement.expire("other", lapsing_buy.code)
    use_cases.settlement.expire("demo", lapsing_sell.code)
    drive.deposit(lapsing_sell, 2, Decimal("0.00001"))  # late, and less than a refund's network fee
    use_cases.resolutions.resolve("demo", lapsing_sell.code, ResolutionRequest(Resolution.REFUND, "late"))
    drive.buy("demo", "alice", "30")
    drive.sell("other", "alice", "0.0005")
    drive.deposit(drive.sell("other", "alice", "0.0002"), 1)
    return drive.done


def resolve(use_cases: UseCases, drive: Driver) -> None:
    """The operator's resolutions: a BLOCKED sell's amount accepted (demo: ToPayout; other: COMPLETED),
    one refunded and its refund sent, one refunding."""
    for partner in ("demo", "other"):
        accepted = drive.sell(partner, "alice", "0.001")
        drive.deposit(accepted, 2, Decimal("0.0008"))
        use_cases.resolutions.resolve(
            partner, accepted.code, ResolutionRequest(Resolution.ACCEPT_RECEIVED, "ok")
        )
    refunded = drive.sell("other", "alice", "0.001")
    drive.deposit(refunded, 2, Decimal("0.0012"))
    use_cases.resolutions.resolve("other", refunded.code, ResolutionRequest(Resolution.REFUND, "sent back"))
    for confirmations in (1, 2):
        use_cases.settlement.report_sendout("other", SendoutReport(refunded.code, "refund-1", confirmations))
    refunding = drive.sell("demo", "bob", "0.001")
    drive.deposit(refunding, 2, Decimal("0.0009"))
    use_cases.resolutions.resolve("demo", refunding.code, ResolutionRequest(Resolution.REFUND, "sent back"))


def replay_what_exports_read(ledger: Ledger, database_url: str) -> None:
    """The read models and the postings of `ledger`'s log, replayed into `database_url`: what an export of a
    partner's period reads."""
    for spec in (READ_MODELS, by_name("Postings")):
        view = open_view(database_url, spec)
        try:
            replay(ledger, spec, view)
        finally:
            view.datastore.close()
