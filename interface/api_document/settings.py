"""What the settings decide, said in the API document: the codes a request may name and the scale of its
amounts.

The service refuses (422) a trust level, currency, crypto-currency or payment method its settings do not
know, a payment method of the other direction or of another currency, and an amount with more decimal places
than its asset has. The document is built once per application, from the settings it runs with, so each of
these is an `enum` or a `multipleOf` there (with `if`/`then` where another field of the body names the
asset), and a client or a test generating requests from the document sends only what the service accepts.
A callback URL is described by the default rule: https, to a host name (callback_http_hosts may allow plain
http for named local hosts; an IP address literal is accepted too when public, which the pattern leaves out).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from application.settings import Direction, Settings
from domain.callback_urls import SPECIAL_NAMES
from domain.pricing import MAX_AMOUNT
from domain.reserves import AdjustmentKind, ReserveType

PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# https, a host name of at least two labels whose last is lowercase, starts with a letter and is no
# special-use name
# (`.test`, `.local`, ...), an optional port, and a path and query of URL characters without
# percent-encoding, a fragment, spaces or backslashes
SPECIAL = "|".join(sorted({name.rpartition(".")[2] for name in SPECIAL_NAMES}))
CALLBACK_URL = {
    "format": "uri",
    "pattern": rf"^https://(?:{LABEL}\.)+(?!(?:{SPECIAL})(?:[:/]|$))[a-z](?:[a-z0-9-]{{0,61}}[a-z0-9])?"
    rf"(?::{PORT})?(?:/[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?$",
    "description": "https to a public host (no user information, fragment or percent-encoding); the host "
    "must resolve to public addresses only",
}
BUYS = ("BrokerBuy", "BrokerBuyCreate", "AccountBuySimulation", "AccountBuy")
SELLS = ("BrokerSell", "BrokerSellByFiatValue", "BrokerSellByCryptoAmount", "AccountSell")


def settings_rules(settings: Settings) -> dict[str, dict[str, Any]]:
    """Per request schema: what to add to each of its `properties`, and `allOf` rules across fields."""
    fiat = sorted(settings.currencies)
    crypto = sorted(settings.cryptos)
    fiat_places = max(currency.minor_units for currency in settings.currencies.values())
    crypto_places = max(one.precision for one in settings.cryptos.values())
    fiat_amount, crypto_amount = _amount(fiat_places), _amount(crypto_places)
    rules: dict[str, dict[str, Any]] = {
        "CustomerCreate": {
            "properties": {"trustLevel": _enum(sorted(settings.trust_levels)), "currencyCode": _enum(fiat)}
        },
        "AccountCreate": {"properties": {"dcCode": _enum(crypto)}},
        "ChainDeposit": {
            "properties": {"cryptoCode": _enum(crypto), "cryptoAmount": crypto_amount},
            "allOf": _scale_of(settings, "cryptoCode", "cryptoAmount", crypto),
        },
        "ReserveAdjustmentCreate": {
            "properties": {
                "code": _enum(sorted({*fiat, *crypto})),
                "amount": _amount(max(_places(settings, code) for code in {*fiat, *crypto})),
            },
            "allOf": [
                *_scale_of(settings, "code", "amount", sorted({*fiat, *crypto})),
                *_reserve_shape(fiat),
            ],
        },
    }
    # the alternative endpoints read amounts at the 15 significant digits of a double: 999999999999999.5
    # is read as 10^15 and refused
    double_fiat = _amount(fiat_places, MAX_AMOUNT - Decimal("0.5"))
    double_crypto = _amount(crypto_places, MAX_AMOUNT - Decimal("0.5"))
    for direction, names in ((Direction.BUY, BUYS), (Direction.SELL, SELLS)):
        methods = {code: m for code, m in settings.payment_methods.items() if m.direction is direction}
        for name in names:
            rules[name] = {
                "properties": {
                    "paymentMethodCode": _enum(sorted(methods)),
                    "currencyCode": _enum(fiat),
                    "currency": _enum(fiat),
                    "cryptoCode": _enum(crypto),
                    "fiatValue": fiat_amount,
                    "amount": double_fiat,
                    "cryptoAmount": double_crypto if name.startswith("Account") else crypto_amount,
                    "requestedPrice": fiat_amount,  # fiat per unit of crypto, at the currency's scale
                    "callbackUrl": CALLBACK_URL,
                },
                "allOf": [
                    *_method_currency(methods, "currency" if name.startswith("Account") else "currencyCode"),
                    *_scale_of(settings, "cryptoCode", "cryptoAmount", crypto),
                ],
            }
    return rules


def apply_settings_rules(components: dict[str, Any], settings: Settings) -> None:
    for name, rules in settings_rules(settings).items():
        schema = components.get(name)
        if schema is None or "properties" not in schema:
            continue
        properties = schema["properties"]
        for field, extra in rules["properties"].items():
            if field in properties:
                properties[field] = _narrowed(properties[field], extra)
        present = [rule for rule in rules.get("allOf", []) if _names_present(rule, properties)]
        if present:
            schema["allOf"] = present


def _enum(values: list[str]) -> dict[str, Any]:
    return {"enum": values}


def _places(settings: Settings, code: str) -> int:
    if code in settings.cryptos:
        return settings.cryptos[code].precision
    return settings.currencies[code].minor_units


def _step(places: int) -> float:
    return float(Decimal(1).scaleb(-places))


def _amount(places: int, below: Decimal = MAX_AMOUNT) -> dict[str, Any]:
    """An amount of an asset with `places` decimal places, below the ledger's largest amount."""
    return {"multipleOf": _step(places), "exclusiveMaximum": float(below)}


def _scale_of(settings: Settings, code_field: str, amount_field: str, codes: list[str]) -> list[Any]:
    """Where the body names the asset: the amount at that asset's scale, for the assets coarser than the
    finest (which the amount's own `multipleOf` already says)."""
    finest = max(_places(settings, code) for code in codes)
    return [
        {
            "if": {"properties": {code_field: {"const": code}}, "required": [code_field]},
            "then": {"properties": {amount_field: {"multipleOf": _step(_places(settings, code))}}},
        }
        for code in codes
        if _places(settings, code) < finest
    ]


def _method_currency(methods: dict[str, Any], currency_field: str) -> list[Any]:
    """A payment method is for one currency: a body naming both names that one."""
    return [
        {
            "if": {"properties": {"paymentMethodCode": {"const": code}}, "required": ["paymentMethodCode"]},
            "then": {"properties": {currency_field: {"enum": [method.currency, None]}}},
        }
        for code, method in sorted(methods.items())
    ]


def _reserve_shape(fiat: list[str]) -> list[Any]:
    """An OpeningBalance names toReserve only, a Move fromReserve too; a hot wallet or cold store holds
    crypto-currencies only."""
    exchange_only = {"properties": {"type": {"enum": [ReserveType.EXCHANGE.value]}}}
    return [
        {
            "if": {"properties": {"kind": {"const": AdjustmentKind.OPENING_BALANCE.value}}},
            "then": {"properties": {"fromReserve": {"type": "null"}}},
        },
        {
            "if": {"properties": {"kind": {"const": AdjustmentKind.MOVE.value}}},
            "then": {"properties": {"fromReserve": {"type": "object"}}, "required": ["fromReserve"]},
        },
        {
            "if": {"properties": {"code": {"enum": fiat}}},
            "then": {
                "properties": {
                    "toReserve": exchange_only,
                    "fromReserve": {"anyOf": [{"type": "null"}, exchange_only]},
                }
            },
        },
    ]


def _names_present(rule: dict[str, Any], properties: dict[str, Any]) -> bool:
    named = {*rule["if"]["properties"], *rule["then"]["properties"]}
    return named <= set(properties)


def _narrowed(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` added to the schema of a value, or to the non-null options of an optional one."""
    key = "anyOf" if "anyOf" in schema else "oneOf" if "oneOf" in schema else None
    if schema.get("type") == "null":
        return schema
    if key is None:
        return _merged(schema, extra)
    options = [option if option.get("type") == "null" else _merged(option, extra) for option in schema[key]]
    return {**schema, key: options}


def _merged(schema: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = {**schema, **extra}
    if "enum" in extra:  # the enum says it all; a pattern or length beside it only repeats it
        merged = {k: v for k, v in merged.items() if k not in ("pattern", "minLength", "maxLength")}
    if "description" in schema and "description" in extra:
        merged["description"] = f"{schema['description']}; {extra['description']}"
    return merged
