"""The API's settings, and the loader of the whole settings file.

One TOML file holds everything. The ledger's sections (currencies, cryptos, trust levels, payment methods,
partners' features and callback secrets, the price source) are declared in `application/settings.py`; the
API's are declared here: `[tokens]` (what the access tokens say and how long they live), `[rate_limits]`
and each partner's `clients` with their roles. Each part decodes the same document and leaves the other's
keys alone; `load_service_settings` decodes both, checks both and refuses a key that neither declares, so
a misspelt section is reported as it always was (`Object contains unknown field ...`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import msgspec

from application.credentials import ConfiguredClient
from application.settings import (
    Base,
    Partner,
    Settings,
    SettingsError,
    consistency_problems,
    decode_document,
    read_settings,
)


class Role(StrEnum):
    BROKER = "broker"
    OPERATOR = "operator"
    AUDITOR = "auditor"


class Client(Base, kw_only=True):
    roles: list[Role]
    secret_hash: str | None = None  # the operator's own hash; a client without one gets a generated secret


class ApiPartner(Base, kw_only=True, forbid_unknown_fields=False):
    """A partner's API clients; its business settings (features, callback secret) are the ledger's."""

    clients: dict[str, Client] = {}


class TokenSettings(Base, kw_only=True):
    """What the service's tokens say: who issued them, what they are for (`audience`, the API's bearer tokens;
    `console_audience`, the web console's sessions, which the API refuses) and how long an API token lives."""

    issuer: str = "broker-ledger"
    audience: str = "broker-ledger-api"
    console_audience: str = "broker-ledger-console"
    lifetime_seconds: int = 3600


class RateLimitSettings(Base, kw_only=True):
    """Requests per client (per remote address before a token is had), a token bucket in each worker."""

    enabled: bool = True
    requests_per_second: float = 200.0  # the bucket refills at this rate
    burst: int = 400  # and holds this many requests: a client may send this many at once


class HeavyReadSettings(Base, kw_only=True):
    """How many heavy reads of one partner run at once in each worker (`interface/http/heavy_reads.py`), and
    how long one waits for a slot before 429 `heavy_reads_busy` (their own pool is a share of each worker's
    connection budget, BROKER_LEDGER_DB_CONNECTIONS: `application.store.database.api_pools`)."""

    per_partner: int = 1
    wait_seconds: float = 1.0


class HttpSettings(Base, kw_only=True):
    """How long a request may take to arrive (`interface/http/server_limits.py`): its request line and
    headers, then
    its body. Late, it is answered 408 and its connection closed."""

    head_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0


class ApiSettings(Base, kw_only=True, forbid_unknown_fields=False):
    """The API's sections of the settings file; the ledger's (application/settings.py) are left to it."""

    partners: dict[str, ApiPartner] = {}
    tokens: TokenSettings = TokenSettings()
    rate_limits: RateLimitSettings = RateLimitSettings()
    heavy_reads: HeavyReadSettings = HeavyReadSettings()
    http: HttpSettings = HttpSettings()


@dataclass(frozen=True)
class ServiceSettings:
    """The whole settings file: the ledger's part and the API's. It is also what the credentials are made
    for (`application.credentials.CredentialSettings`)."""

    ledger: Settings
    api: ApiSettings

    def clients(self) -> dict[str, ConfiguredClient]:
        """Every configured client by its id (ids are unique across partners, as the loader checks)."""
        return {
            client_id: ConfiguredClient(
                partner=code,
                roles=frozenset(role.value for role in client.roles),
                secret_hash=client.secret_hash,
            )
            for code, partner in self.api.partners.items()
            for client_id, client in partner.clients.items()
        }

    def callback_secrets(self) -> dict[str, str | None]:
        """Each partner's configured Standard Webhooks secret; None where one is to be generated."""
        return {code: partner.callback_secret for code, partner in self.ledger.partners.items()}


def load_service_settings(path: Path | None = None) -> ServiceSettings:
    """The settings file at `path` (the service's: $BROKER_LEDGER_SETTINGS, read at start), else the demo
    settings; `SettingsError` with one line per problem of either part."""
    return decode_service_settings(*read_settings(path))


def decode_service_settings(raw: bytes | str, source: str = "settings") -> ServiceSettings:
    ledger = decode_document(raw, Settings, source)
    api = decode_document(raw, ApiSettings, source)
    problems = undeclared_keys(msgspec.toml.decode(raw)) + consistency_problems(ledger) + api_problems(api)
    if problems:
        raise SettingsError(source, problems)
    return ServiceSettings(ledger, api)


def undeclared_keys(document: dict) -> list[str]:
    """The keys neither part declares, at the top and in each partner's table (where both parts read)."""
    problems = _unknown(document, _fields(Settings, ApiSettings), "$")
    for code, partner in document.get("partners", {}).items():
        problems += _unknown(partner, _fields(Partner, ApiPartner), f"$.partners.{code}")
    return problems


def _fields(*shapes: type[msgspec.Struct]) -> set[str]:
    return {field.encode_name for shape in shapes for field in msgspec.structs.fields(shape)}


def _unknown(table: dict, declared: set[str], where: str) -> list[str]:
    return [f"Object contains unknown field `{key}` - at `{where}`" for key in table if key not in declared]


def api_problems(api: ApiSettings) -> list[str]:
    """What msgspec cannot check: every client has a role and one partner, the rate limits can work."""
    problems: list[str] = []
    owners: dict[str, str] = {}
    for code, partner in api.partners.items():
        for client_id, client in partner.clients.items():
            if not client.roles:
                problems.append(f"partners.{code}.clients.{client_id}.roles must not be empty")
            if client_id in owners:
                problems.append(
                    f"client id {client_id!r} is configured for partners {owners[client_id]!r}"
                    f" and {code!r}; client ids must be unique"
                )
            owners.setdefault(client_id, code)
    return (
        problems
        + _token_problems(api.tokens)
        + _rate_limit_problems(api.rate_limits)
        + _heavy_read_problems(api.heavy_reads)
        + _http_problems(api.http)
    )


def _token_problems(tokens: TokenSettings) -> list[str]:
    if tokens.audience == tokens.console_audience:
        return ["tokens.audience and tokens.console_audience must differ: a console session is no API token"]
    return []


def _rate_limit_problems(limits: RateLimitSettings) -> list[str]:
    problems = []
    if not (math.isfinite(limits.requests_per_second) and limits.requests_per_second > 0):
        problems.append("rate_limits.requests_per_second must be a positive number")
    if limits.burst < 1:
        problems.append("rate_limits.burst must be at least 1")
    return problems


def _heavy_read_problems(heavy: HeavyReadSettings) -> list[str]:
    problems = []
    if heavy.per_partner < 1:
        problems.append("heavy_reads.per_partner must be at least 1")
    if not (math.isfinite(heavy.wait_seconds) and heavy.wait_seconds >= 0):
        problems.append("heavy_reads.wait_seconds must be a number of seconds, 0 or more")
    return problems


def _http_problems(http: HttpSettings) -> list[str]:
    return [
        f"http.{name} must be a positive number of seconds"
        for name, seconds in (
            ("head_timeout_seconds", http.head_timeout_seconds),
            ("body_timeout_seconds", http.body_timeout_seconds),
        )
        if not (math.isfinite(seconds) and seconds > 0)
    ]
