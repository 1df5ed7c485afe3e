"""From a request body to the command of its use case, by one declared mapping rather than a copy per field.

A body's field becomes the command's field of the same name, but for the names in `RENAMED` (the API's
`...Code` suffixes the commands leave out); a field the client left out (None) takes the command's default.
The fields in `NOT_IN_COMMAND` say how to run the use case and are handed to it by the controller. A body
field the command does not have is a TypeError, not a value quietly lost (the tests map every body of
`COMMANDS`: `tests/interface/test_body_commands.py`).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from application.commands import BuyRequest, SellRequest
from interface.schemas.requests import BrokerBuy, BrokerSell

RENAMED = {"currency_code": "currency", "crypto_code": "crypto", "payment_method_code": "payment_method"}
NOT_IN_COMMAND = frozenset({"stage"})  # BrokerBuyCreate: whether to stage the buy, an argument of create_buy

# Each body (and the bodies derived from it) and the command it maps to.
COMMANDS: dict[type[msgspec.Struct], type[Any]] = {BrokerBuy: BuyRequest, BrokerSell: SellRequest}

Command = TypeVar("Command")


def command_fields(body: msgspec.Struct) -> dict[str, Any]:
    """The body's fields by the command's names: renamed, those left out and those not for it dropped."""
    return {
        RENAMED.get(name, name): value
        for name, value in msgspec.structs.asdict(body).items()
        if value is not None and name not in NOT_IN_COMMAND
    }


def to_command(body: msgspec.Struct, command: type[Command]) -> Command:
    return command(**command_fields(body))


def buy_request(body: BrokerBuy) -> BuyRequest:
    return to_command(body, BuyRequest)


def sell_request(body: BrokerSell) -> SellRequest:
    return to_command(body, SellRequest)
