"""The ledger's settings: its part of the one TOML settings file, decoded by msgspec into typed structs and
checked for consistency.

The file also holds the API's sections (`[tokens]`, `[rate_limits]` and each partner's `clients`), which
`interface/http/settings.py` declares and checks; the structs here leave them alone, and the service loads the
file through `interface.http.settings.load_service_settings`, which also refuses keys that neither part
declares.

Money values are written as strings or numbers in TOML and read as `Decimal`. `load_settings` raises
`SettingsError` with one line per problem, each naming the key, so an operator can fix the file.
"""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import TypeVar

import msgspec

from domain.callback_urls import CallbackUrlRules
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
SETTINGS_ENV = "BROKER_LEDGER_SETTINGS"  # the settings file (interface.environment reads it)


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


class Partner(Base, kw_only=True, forbid_unknown_fields=False):
    """A partner's business settings; its API clients (`clients`) are the interface's (ApiPartner)."""

    features: list[Feature] = []
    callback_secret: str | None = None  # Standard Webhooks secret; generated when absent

    @property
    def has_payouts(self) -> bool:
        return Feature.PAYOUTS in self.features


class PriceSourceSettings(Base, kw_only=True):
    kind: str = "fixed"  # "fixed": prices from the crypto settings; "ticker": an exchange over HTTP
    url: str | None = None  # ticker URL template with {crypto} and {currency}
    max_age_seconds: int = 60  # a ticker price older than this is refused as stale
    timeout_seconds: float = 5.0


class Settings(Base, kw_only=True, forbid_unknown_fields=False):
    """The ledger's sections of the settings file; the API's (interface/http/settings.py) are left to it."""

    base_currency: str
    currencies: dict[str, Currency]
    cryptos: dict[str, Crypto]
    trust_levels: dict[str, TrustLevel]
    payment_methods: dict[str, PaymentMethod]
    partners: dict[str, Partner]
    price_source: PriceSourceSettings = PriceSourceSettings()
    callback_http_hosts: list[str] = []  # hosts that may receive callbacks over plain http

    def fiat(self, code: str) -> Asset:
        return self.currencies[code].asset(code)

    def crypto_asset(self, code: str) -> Asset:
        return self.cryptos[code].asset(code)


def read_settings(path: Path | None = None) -> tuple[bytes, str]:
    """The settings file's bytes and its name for messages: `path`, else the demo settings. The service's
    path ($BROKER_LEDGER_SETTINGS) is read from the environment at start (`interface.environment`) and
    handed here."""
    path = path or DEFAULT_SETTINGS
    try:
        return path.read_bytes(), str(path)
    except OSError as error:
        raise SettingsError(str(path), [f"cannot read the settings file: {error.strerror}"]) from None


def load_settings(path: Path | None = None) -> Settings:
    return decode_settings(*read_settings(path))


def decode_settings(raw: bytes | str, source: str = "settings") -> Settings:
    settings = decode_document(raw, Settings, source)
    problems = consistency_problems(settings)
    if problems:
        raise SettingsError(source, problems)
    return settings


Shape = TypeVar("Shape", bound=msgspec.Struct)


def decode_document(raw: bytes | str, shape: type[Shape], source: str) -> Shape:
    """The settings document decoded as `shape` (the ledger's part or the API's); `SettingsError` for what
    msgspec refuses: TOML that does not parse, or the first value of a wrong type, named by its key."""
    try:
        return msgspec.toml.decode(raw, type=shape)
    except msgspec.ValidationError as error:
        raise SettingsError(source, [str(error)]) from None
    except msgspec.DecodeError as error:
        raise SettingsError(source, [f"not valid TOML: {error}"]) from None


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
    return problems + _price_source_problems(settings.price_source)


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
            CallbackUrlRules(settings.callback_http_hosts).parse(method.callback_url)
        except CallbackUrlRefused as error:
            problems.append(f"payment_methods.{code}.callback_url: {error.detail}")
    return problems
