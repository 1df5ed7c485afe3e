"""A concurrent mix of everything that moves money, over HTTP, as in docs/api.md: buys (some staged, then
committed) completed by a sendout report, sells paid by a deposit reported on chain and then paid out (some
paid with another amount: BLOCKED), and the operator's moves between the hot wallet and a cold store.

Each thread repeats whole flows until told to stop, so nothing is left half way, and adds what its flows
moved into each reserve to `Expected`, for comparing with the reserves at the end.
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tests.e2e.support import Api, Customer, buy_body, expect, sell_body

CONFIRMED = 2  # BTC's required confirmations in the demo settings
SELL_CRYPTO = Decimal("0.0002")
ONE_SATOSHI = Decimal("0.00000001")
HOT = ("hot-wallet", "HotWallet")
BANK = ("bank", "Exchange")


def adjustment(kind: str, asset: str, amount: Decimal, to: tuple[str, str], source: Any = None) -> dict:
    body: dict[str, Any] = {"kind": kind, "code": asset, "amount": amount}
    body["toReserve"] = {"name": to[0], "type": to[1]}
    if source:
        body["fromReserve"] = {"name": source[0], "type": source[1]}
    return body


@dataclass
class Expected:
    """How much each (reserve, asset) total should have moved, and how many flows of each kind ran."""

    totals: dict[tuple[str, str], Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    flows: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, flow: str, **moved: Decimal) -> None:
        """moved: `<reserve>_<asset>` -> amount, e.g. hot_wallet_BTC=-0.001 (underscores for dashes)."""
        with self._lock:
            self.flows[flow] += 1
            for name, amount in moved.items():
                reserve, _, asset = name.rpartition("_")
                self.totals[reserve.replace("_", "-"), asset] += amount


def buy_and_send_out(
    broker: Api, operator: Api, customer: Customer, expected: Expected, staged: bool
) -> None:
    created = broker.post_json("/brokerbuy", buy_body(customer, 25, stage=True if staged else None))
    tx = expect(created, 201)["transaction"]
    code = tx["transactionCode"]
    if staged:
        committed = expect(broker.post_json(f"/transactions/custodian/{code}/commit"), 200)["transaction"]
        assert committed["status"] == "Sending", committed
    sendout = {"transactionCode": code, "txId": f"out-{uuid.uuid4().hex}", "confirmations": 1}
    expect(operator.post_json("/chain/sendouts", sendout), 200)
    done = expect(operator.post_json("/chain/sendouts", {**sendout, "confirmations": CONFIRMED}), 200)
    assert done["transaction"]["status"] == "COMPLETED", done
    sent = Decimal(tx["executedAmounts"]["cryptoAmount"]) + Decimal(tx["fees"]["networkFeeCrypto"])
    fiat = Decimal(tx["executedAmounts"]["fiatValue"])
    expected.add("staged buy" if staged else "buy", hot_wallet_BTC=-sent, bank_EUR=fiat)


def sell_and_pay_out(broker: Api, operator: Api, customer: Customer, expected: Expected, block: bool) -> None:
    created = broker.post_json("/paymentrequest/brokersell", sell_body(customer, cryptoAmount=SELL_CRYPTO))
    tx = expect(created, 201)["transaction"]
    code, amount = tx["transactionCode"], Decimal(tx["executedAmounts"]["cryptoAmount"])
    paid = amount + ONE_SATOSHI if block else amount
    deposit = {
        "cryptoCode": "BTC",
        "address": tx["destinationCryptoAddress"],
        "txId": f"in-{uuid.uuid4().hex}",
        "cryptoAmount": paid,
        "confirmations": 1,
    }
    seen = expect(operator.post_json("/chain/deposits", deposit), 200)["transaction"]["status"]
    if block:
        assert seen == "BLOCKED", seen
        expected.add("blocked sell", hot_wallet_BTC=paid)
        return
    confirmed = expect(operator.post_json("/chain/deposits", {**deposit, "confirmations": CONFIRMED}), 200)
    assert confirmed["transaction"]["status"] == "ToPayout", confirmed
    path = f"/transactions/custodian/{code}"
    expect(operator.put_json(f"{path}/payoutconfirming", {"paymentReference": f"p-{code}"}), 200)
    done = expect(operator.put_json(f"{path}/payout", {}), 200)["transaction"]
    assert done["status"] == "COMPLETED", done
    expected.add("sell", hot_wallet_BTC=amount, bank_EUR=-Decimal(tx["executedAmounts"]["fiatValue"]))


def move_and_back(operator: Api, cold: tuple[str, str], expected: Expected) -> None:
    """Moves a little BTC from the hot wallet to a cold store and back: two postings, nothing changes."""
    amount = Decimal("0.01")
    expect(operator.post_json("/reserves/adjustments", adjustment("Move", "BTC", amount, cold, HOT)), 201)
    expect(operator.post_json("/reserves/adjustments", adjustment("Move", "BTC", amount, HOT, cold)), 201)
    expected.add("move and back")


class Traders:
    """Threads repeating flows (each a callable of the iteration number) until `stop()`; errors are kept."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, flow: Callable[[int], None]) -> None:
        thread = threading.Thread(target=self._repeat, args=(flow,), daemon=True)
        self._threads.append(thread)
        thread.start()

    def _repeat(self, flow: Callable[[int], None]) -> None:
        iteration = 0
        while not self._stopping.is_set():
            try:
                flow(iteration)
            except BaseException as error:
                self.errors.append(error)
                return
            iteration += 1

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=60)
