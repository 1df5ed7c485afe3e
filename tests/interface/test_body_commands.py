"""Request bodies become commands by one declared mapping (`interface.transactions.shapes`): every field of
a
body lands in its command, under the command's name, or is declared as not the command's."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import msgspec
import msgspec.inspect
import pytest

from application.commands import BuyRequest, SellRequest
from interface.transactions.shapes import (
    COMMANDS,
    NOT_IN_COMMAND,
    RENAMED,
    BrokerBuy,
    BrokerBuyCreate,
    BrokerSell,
    buy_request,
    sell_request,
    to_command,
)

FULL_BUY = {
    "customerCode": "alice",
    "currencyCode": "EUR",
    "cryptoCode": "BTC",
    "fiatValue": 100,
    "destinationAddress": "bc1qexample",
    "paymentMethodCode": "BANK_EUR_BUY",
    "accountCode": "ACC1",
    "bankAccountNumber": "NL00BANK0123456789",
    "requestedPrice": 50000,
    "callbackUrl": "https://partner.example/cb",
    "blockchainMessage": "hello",
    "data": {"order": "42"},
    "paymentReference": "ref-7",
    "stage": True,
}


def bodies_and_commands() -> list[tuple[type[msgspec.Struct], type]]:
    """Every mapped body and the bodies derived from it, with their command."""
    found = []
    for body, command in COMMANDS.items():
        found += [(kind, command) for kind in (body, *body.__subclasses__())]
    return found


@pytest.mark.parametrize(("body", "command"), bodies_and_commands())
def test_every_body_field_is_a_field_of_its_command_or_declared_as_not_one(body, command):
    command_fields = {field.name for field in dataclasses.fields(command)}
    for name in body.__struct_fields__:
        assert RENAMED.get(name, name) in command_fields or name in NOT_IN_COMMAND, name


@pytest.mark.parametrize(("body", "command"), bodies_and_commands())
def test_every_required_command_field_comes_from_a_required_body_field(body, command):
    required_body = {
        RENAMED.get(field.name, field.name)
        for field in msgspec.inspect.type_info(body).fields
        if field.required
    }
    required = {
        field.name
        for field in dataclasses.fields(command)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    }
    assert required <= required_body


def test_a_full_buy_body_maps_to_the_buy_command_field_by_field():
    body = msgspec.convert(FULL_BUY, BrokerBuyCreate)
    assert buy_request(body) == BuyRequest(
        customer_code="alice",
        currency="EUR",
        crypto="BTC",
        fiat_value=Decimal(100),
        destination_address="bc1qexample",
        payment_method="BANK_EUR_BUY",
        account_code="ACC1",
        requested_price=Decimal(50000),
        bank_account_number="NL00BANK0123456789",
        callback_url="https://partner.example/cb",
        blockchain_message="hello",
        payment_reference="ref-7",
        data={"order": "42"},
    )


def test_fields_a_sell_body_leaves_out_take_the_commands_defaults():
    body = BrokerSell(
        customer_code="alice",
        account_code="ACC1",
        currency_code="EUR",
        crypto_code="BTC",
        payment_method_code="BANK_EUR_SELL",
        crypto_amount=Decimal("0.01"),
    )
    assert sell_request(body) == SellRequest(
        customer_code="alice",
        account_code="ACC1",
        currency="EUR",
        crypto="BTC",
        payment_method="BANK_EUR_SELL",
        crypto_amount=Decimal("0.01"),
    )
    assert sell_request(body).data == {}


def test_a_body_field_its_command_does_not_have_is_refused_rather_than_lost():
    class BuyWithExtra(BrokerBuy):
        voucher: str | None = None

    fields = {name: value for name, value in FULL_BUY.items() if name != "stage"}
    body = msgspec.convert({**fields, "voucher": "FREE"}, BuyWithExtra)
    with pytest.raises(TypeError, match="voucher"):
        to_command(body, BuyRequest)
