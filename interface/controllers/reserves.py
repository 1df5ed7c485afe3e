"""The service's reserves, derived from the ledger postings, and the operator's adjustments of them."""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC
from decimal import Decimal

from litestar import Controller, Request, get, post
from litestar.params import JSONBody
from psycopg_pool import ConnectionPool

from application.commands import AdjustmentRequest
from application.ledger import Ledger
from domain.money import WIDE
from domain.reserves import BANK, HOT_WALLET
from domain.reserves import ReserveAdjustment as Adjustment
from interface.controllers.common import IdempotencyKey, LedgerDep, principal, problems, version_header
from interface.read_your_writes import WritePositions
from interface.schemas import reserves as s
from interface.security import AUDITOR, BROKER, OPERATOR, authorize, roles
from projections.reserve_positions import ReservePosition, read_positions, wait_for_position

log = logging.getLogger("broker_ledger.reserves")
WAIT_SECONDS = 2.0  # how long a read waits for the Postings view to reach the writes made before it


class ReserveController(Controller):
    path = "/reserves"
    tags = ["Reserves"]
    guards = [authorize]
    parameters = version_header()

    @get("/", operation_id="getReserves", opt=roles(BROKER, OPERATOR, AUDITOR), sync_to_thread=True)
    def reserves(self, request: Request, ledger: LedgerDep) -> s.Reserves:
        """The service's reserves per place and asset: total, locked by open transactions, available and
        unconfirmed, derived from the ledger postings and the operator's adjustments (as of the caller's
        partner's last write, unless the postings lag more than two seconds behind)."""
        state = request.app.state
        return reserves_body(
            ledger, current_positions(ledger, state.pool, state.write_positions, principal(request).partner)
        )

    @post(
        "/adjustments",
        operation_id="createReserveAdjustment",
        status_code=201,
        opt=roles(OPERATOR),
        responses=problems(409, 422),
        sync_to_thread=True,
    )
    def adjust(
        self,
        request: Request,
        data: JSONBody[s.ReserveAdjustmentCreate],
        ledger: LedgerDep,
        idempotency_key: IdempotencyKey,
    ) -> s.ReserveAdjustment:
        """Records an opening balance or a move between reserves. Under the same `adjustmentCode` (or the
        same Idempotency-Key) the same adjustment is recorded once; another one is refused (409)."""
        code = data.adjustment_code or adjustment_code_for(principal(request).partner, idempotency_key)
        source = data.from_reserve
        request_ = AdjustmentRequest(
            kind=data.kind,
            asset_code=data.code,
            amount=data.amount,
            to_reserve=data.to_reserve.name,
            to_type=data.to_reserve.type,
            from_reserve=source.name if source else None,
            from_type=source.type if source else None,
            note=data.note,
        )
        return adjustment_body(ledger.record_adjustment(request_, code))


def adjustment_code_for(partner: str, key: str | None) -> str | None:
    """The code of an adjustment made under an idempotency key: the same on every retry."""
    if not key:
        return None
    digest = hashlib.sha256(f"{partner}\x1freserve-adjustment\x1f{key}".encode()).hexdigest()
    return "RA" + digest[:16].upper()


def current_positions(
    ledger: Ledger, pool: ConnectionPool, written: WritePositions, partner: str
) -> list[ReservePosition]:
    """The positions once the Postings view has processed the partner's last write (waiting at most
    WAIT_SECONDS; then what is there), with the built-in reserves of every configured asset."""
    always = [(HOT_WALLET, code) for code in ledger.settings.cryptos]
    always += [(BANK, code) for code in ledger.settings.currencies]
    with pool.connection() as conn:
        last = written.last(conn, partner)
        if not wait_for_position(conn, last, WAIT_SECONDS):
            log.warning(
                "ledger postings behind %s's last write (%d); answering from what is there", partner, last
            )
        return read_positions(conn, always)


def reserves_body(ledger: Ledger, positions: list[ReservePosition]) -> s.Reserves:
    cryptos = ledger.settings.cryptos
    items = [(p.code in cryptos, reserve_body(ledger, p)) for p in positions]
    return s.Reserves(
        crypto_reserves=[item for crypto, item in items if crypto],
        currency_reserves=[item for crypto, item in items if not crypto],
    )


def reserve_body(ledger: Ledger, position: ReservePosition) -> s.Reserve:
    settings = ledger.settings
    if position.code in settings.cryptos:
        quantum = settings.crypto_asset(position.code).quantum
    elif position.code in settings.currencies:
        quantum = settings.fiat(position.code).quantum
    else:
        quantum = None

    def shown(amount: Decimal) -> Decimal:
        return amount if quantum is None else amount.quantize(quantum, context=WIDE)

    return s.Reserve(
        name=position.name,
        type=position.type,
        code=position.code,
        total=shown(position.total),
        locked=shown(position.locked),
        available=shown(position.available),
        unconfirmed=shown(position.unconfirmed),
        updated=None if position.updated is None else position.updated.astimezone(UTC),
    )


def adjustment_body(adjustment: Adjustment) -> s.ReserveAdjustment:
    source = adjustment.source
    return s.ReserveAdjustment(
        adjustment_code=adjustment.code,
        kind=adjustment.kind.value,
        code=adjustment.asset_code,
        amount=adjustment.amount,
        to_reserve=s.ReserveRef(name=adjustment.to.name, type=adjustment.to.type.value),
        from_reserve=None if source is None else s.ReserveRef(name=source.name, type=source.type.value),
        note=adjustment.note,
        created=adjustment.created,
    )
