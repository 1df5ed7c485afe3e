"""The account: a customer's withdraw address paired with the service's deposit address for one crypto."""

from __future__ import annotations

import hashlib
from datetime import datetime
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from domain.ids import business_id


def account_code_for(partner: str, customer_code: str, crypto: str, customer_address: str) -> str:
    """Posting the same address again names the same account, so the code derives from the pair."""
    digest = hashlib.sha256(
        "\x1f".join((partner, customer_code, crypto, customer_address)).encode()
    ).hexdigest()
    return f"AC{digest[:18].upper()}"


class Account(Aggregate):
    @staticmethod
    def create_id(partner: str, code: str, **_: object) -> UUID:
        return business_id("account", partner, code)

    @event("Opened")
    def __init__(
        self,
        partner: str,
        code: str,
        customer_code: str,
        crypto: str,
        customer_address: str,
        deposit_address: str,
        deposit_path: str,
        at: datetime,
    ) -> None:
        self.partner = partner
        self.code = code
        self.customer_code = customer_code
        self.crypto = crypto
        self.customer_address = customer_address
        self.deposit_address = deposit_address
        self.deposit_path = deposit_path
        self.status = "ACTIVE"
        self.created = at
