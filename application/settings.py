"""Settings: one TOML file, decoded by msgspec into typed structs, checked for consistency.

Money values are written as strings or numbers in TOML and read as `Decimal`. `load_settings` raises
`SettingsError` with one line per problem, each naming the key, so an operator can fix the file.
"""

from __future__ import annotations

import math
import os
from decimal import Decimal
from enum import StrEnum
from importlib import resources
from pathlib import Path

import msgspec

from application.callbacks.urls import CallbackUrlPolicy
from domain.errors import CallbackUrlRefused
from domain.money import Asset

PACKAGED_SETTINGS = "demo.toml"  # settings/demo.toml, put into the wheel beside this module (pyproject.toml)


def _default_settings() -> Path:
    """The demo settings: the copy an installed wheel carries in this package, else the repository's
    settings/demo.toml (a checkout, or an editable install: one file, which the wheel takes in)."""
    packaged = resources.files(__package__ or "application").joinpath(PACKAGED_SETTINGS)
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[1] / "settings" / "demo.toml"


DEFAULT_SETTINGS = _default_settings()
SETTINGS_ENV = "BROKER_LEDGER_SETTINGS"


class SettingsError(Exception):
    def __init__(self, source: str, problems: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = problems


class Base(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    pass


class Direction(StrEnum):
    BUY = "buy"
    SELL = "sell"


class Role(StrEnum):
    BROKER = "broker"
    OPERATOR = "operator"
    AUDITOR = "auditor"


class Feature(StrEnum):
    PAYOUTS = "Payouts"


class Currency(Base, kw_only=True):
    minor_units: int = 2
    rate_to_base: Decimal = Decimal(1)  # value of one unit in the base currency, for limits

    def asset(self, code: str) -> Asset:
        return Asset(code, self.minor_units)


class FixedPrice(Base, kw_only=True):
    buy: Decimal
    sell: Decimal


class Crypto(Base, kw_only=True):
    precision: int
    network_fee: Decimal  # a fixed crypto amount per transaction
    required_confirmations: int = 1
    extended_public_key: str  # account-level key (xpub/zpub) the deposit addresses derive from
    derivation_path: str  # path of that key, e.g. "m/84'/0'/0'"; addresses are <path>/0/<index>
    prices: dict[str, FixedPrice] = {}  # fixed prices per fiat currency code (used by kind "fixed")

    def asset(self, code: str) -> Asset:
        return Asset(code, self.precision)


class TrustLevel(Base, kw_only=True):
    buy_daily: Decimal
    buy_monthly: Decimal
    sell_daily: Decimal
    sell_monthly: Decimal

    def limit(self, direction: str, period: str) -> Decimal:
        return getattr(self, f"{direction}_{period}")


class PaymentMethod(Base, kw_only=True):
    direction: Direction
    currency: str
    fee_rate: Decimal = Decimal(0)  # partner fee, as a fraction of the fiat value
    bank_fee: Decimal = Decimal(0)  # fixed fiat amount
    wiggle_room_up: Decimal | None = None  # fraction above the current price; None: the default
    wiggle_room_down: Decimal | None = None
    validity_minutes: int = 30
    callback_url: str | None = None

    def wiggle_up(self) -> Decimal:
        default = Decimal("0.10") if self.direction is Direction.BUY else Decimal("0.05")
        return default if self.wiggle_room_up is None else self.wiggle_room_up

    def wiggle_down(self) -> Decimal:
        default = Decimal("0.05") if self.direction is Direction.BUY else Decimal("0.10")
        return default if self.wiggle_room_down is None else self.wiggle_room_down


class Client(Base, kw_only=True):
    roles: list[Role]
    secret_hash: str | None = None  # argon2 hash; demo clients get one generated on first start


class Partner(Base, kw_only=True):
    features: list[Feature] = []
    clients: dict[str, Client] = {}
    callback_secret: str | None = None  # Standard Webhooks secret; generated when absent

    @property
    def has_payouts(self) -> bool:
        return Feature.PAYOUTS in self.features


class PriceSourceSettings(Base, kw_only=True):
    kind: str = "fixed"  # "fixed": prices from the crypto settings; "ticker": an exchange over HTTP
    url: str | None = None  # ticker URL template with {crypto} and {currency}
    max_age_seconds: int = 60  # a ticker price older than this is refused as stale
    timeout_seconds: float = 5.0


class TokenSettings(Base, kw_only=True):
    issuer: str = "broker-ledger"
    audience: str = "broker-ledger-api"
    lifetime_seconds: int = 3600


class RateLimitSettings(Base, kw_only=True):
    """Requests per client (per remote address before a token is had), a token bucket in each worker."""

    enabled: bool = True
    requests_per_second: float = 200.0  # the bucket refills at this rate
    burst: int = 400  # and holds this many requests: a client may send this many at once


class Settings(Base, kw_only=True):
    base_currency: str
    currencies: dict[str, Currency]
    cryptos: dict[str, Crypto]
    trust_levels: dict[str, TrustLevel]
    payment_methods: dict[str, PaymentMethod]
    partners: dict[str, Partner]
    price_source: PriceSourceSettings = PriceSourceSettings()
    tokens: TokenSettings = TokenSettings()
    rate_limits: RateLimitSettings = RateLimitSettings()
    callback_http_hosts: list[str] = []  # hosts that may receive callbacks over plain http

    def fiat(self, code: str) -> Asset:
        return self.currencies[code].asset(code)

    def crypto_asset(self, code: str) -> Asset:
        return self.cryptos[code].asset(code)


def settings_path() -> Path:
    return Path(os.environ.get(SETTINGS_ENV) or DEFAULT_SETTINGS)


def load_settings(path: Path | None = None) -> Settings:
    path = path or settings_path()
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise SettingsError(str(path), [f"cannot read the settings file: {error.strerror}"]) from None
    return decode_settings(raw, str(path))


def decode_settings(raw: bytes | str, source: str = "settings") -> Settings:
    try:
        settings = msgspec.toml.decode(raw, type=Settings)
    except msgspec.ValidationError as error:
        raise SettingsError(source, [str(error)]) from None
    except msgspec.DecodeError as error:
        raise SettingsError(source, [f"not valid TOML: {error}"]) from None
    problems = consistency_problems(settings)
    if problems:
        raise SettingsError(source, problems)
    return settings


def consistency_problems(settings: Settings) -> list[str]:
    """Cross-references that msgspec cannot check: codes that must exist, values that must be sane."""
    problems: list[str] = []
    if settings.base_currency not in settings.currencies:
        problems.append(f"base_currency {settings.base_currency!r} is not in [currencies]")
    for code, currency in settings.currencies.items():
        problems.extend(_currency_problems(code, currency))
    for code, crypto in settings.cryptos.items():
        problems.extend(_crypto_problems(settings, code, crypto))
    for code, level in settings.trust_levels.items():
        for field in ("buy_daily", "buy_monthly", "sell_daily", "sell_monthly"):
            if getattr(level, field) < 0:
                problems.append(f"trust_levels.{code}.{field} must not be negative")
    for code, method in settings.payment_methods.items():
        problems.extend(_payment_method_problems(settings, code, method))
    for code, partner in settings.partners.items():
        for client_id, client in partner.clients.items():
            if not client.roles:
                problems.append(f"partners.{code}.clients.{client_id}.roles must not be empty")
    problems += _price_source_problems(settings.price_source)
    return problems + _rate_limit_problems(settings.rate_limits)


def _currency_problems(code: str, currency: Currency) -> list[str]:
    problems = []
    if not 0 <= currency.minor_units <= 8:
        problems.append(f"currencies.{code}.minor_units must be between 0 and 8")
    if currency.rate_to_base <= 0:
        problems.append(f"currencies.{code}.rate_to_base must be positive")
    return problems


def _price_source_problems(source: PriceSourceSettings) -> list[str]:
    if source.kind not in ("fixed", "ticker"):
        return ["price_source.kind must be 'fixed' or 'ticker'"]
    if source.kind == "ticker" and not source.url:
        return ["price_source.url is required when price_source.kind is 'ticker'"]
    return []


def _rate_limit_problems(limits: RateLimitSettings) -> list[str]:
    problems = []
    if not (math.isfinite(limits.requests_per_second) and limits.requests_per_second > 0):
        problems.append("rate_limits.requests_per_second must be a positive number")
    if limits.burst < 1:
        problems.append("rate_limits.burst must be at least 1")
    return problems


def _crypto_problems(settings: Settings, code: str, crypto: Crypto) -> list[str]:
    problems = []
    if not 0 <= crypto.precision <= 18:
        problems.append(f"cryptos.{code}.precision must be between 0 and 18")
    if crypto.network_fee < 0:
        problems.append(f"cryptos.{code}.network_fee must not be negative")
    if crypto.required_confirmations < 1:
        problems.append(f"cryptos.{code}.required_confirmations must be at least 1")
    for currency, price in crypto.prices.items():
        if currency not in settings.currencies:
            problems.append(f"cryptos.{code}.prices.{currency}: currency not in [currencies]")
        if price.buy <= 0 or price.sell <= 0:
            problems.append(f"cryptos.{code}.prices.{currency}: buy and sell must be positive")
    return problems


def _payment_method_problems(settings: Settings, code: str, method: PaymentMethod) -> list[str]:
    problems = []
    if method.currency not in settings.currencies:
        problems.append(f"payment_methods.{code}.currency {method.currency!r} is not in [currencies]")
    if not Decimal(0) <= method.fee_rate < Decimal(1):
        problems.append(f"payment_methods.{code}.fee_rate must be at least 0 and below 1")
    if method.bank_fee < 0:
        problems.append(f"payment_methods.{code}.bank_fee must not be negative")
    if method.validity_minutes < 1:
        problems.append(f"payment_methods.{code}.validity_minutes must be at least 1")
    for side in ("wiggle_room_up", "wiggle_room_down"):
        value = getattr(method, side)
        if value is not None and not Decimal(0) <= value < Decimal(1):
            problems.append(f"payment_methods.{code}.{side} must be at least 0 and below 1")
    if method.callback_url is not None:  # the static rules; the host is resolved and checked when sending
        try:
            CallbackUrlPolicy(settings.callback_http_hosts).parse(method.callback_url)
        except CallbackUrlRefused as error:
            problems.append(f"payment_methods.{code}.callback_url: {error.detail}")
    return problems
