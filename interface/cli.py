"""The `broker-ledger` console script.

Commands live next to what they drive and are registered here by import path, so that each loads
only when used (`serve` from `interface.serve`; `projections`, `audit` and `analyst` from
`interface.projections_cli`, `interface.audit_cli` and `interface.analyst_cli`);
`settings check` and `token` are defined here.

A command returns its exit code: 0 for success, 2 for a problem the user can fix (said on stderr).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from application.credentials import ClientRecord, CredentialsError, stored_token_key, var_dir
from application.ports import SystemClock
from application.settings import SettingsError, settings_path
from application.store.database import APP_NAME, ensure_schema, resolve_database_url
from application.store.log import EVENTS_SCHEMA
from interface.auth import InvalidScope, TokenService
from interface.settings import ServiceSettings, load_service_settings

USAGE_ERROR = 2
DISTRIBUTION = "broker-ledger"


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's), for `--version`."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


app = App(
    name="broker-ledger",
    help="Broker Ledger: an event-sourced ledger for broker platforms trading crypto for fiat.",
    version=package_version,
)
settings_app = App(name="settings", help="Check the settings file.")
app.command(settings_app)

SettingsOption = Annotated[
    Path | None,
    Parameter(
        name="--settings",
        help="Settings file; default $BROKER_LEDGER_SETTINGS, else settings/demo.toml.",
    ),
]


def fail(message: str) -> int:
    print(message, file=sys.stderr)
    return USAGE_ERROR


def event_store_url() -> str:
    """The database the service uses (as `serve` finds it), with the event store's schema in place."""
    url = resolve_database_url(var_dir())
    ensure_schema(url, EVENTS_SCHEMA)
    return url


def settings_or_none(path: Path | None) -> ServiceSettings | None:
    """The settings at `path` (or the default), or None after printing each problem to stderr."""
    try:
        return load_service_settings(path or settings_path())
    except SettingsError as error:
        for problem in error.problems:
            print(f"{error.source}: {problem}", file=sys.stderr)
        return None


@settings_app.command(name="check")
def check_settings(*, file: Annotated[Path | None, Parameter(name=["--file", "--settings"])] = None) -> int:
    """Load the settings, report every problem, or print a short summary.

    Parameters
    ----------
    file
        Settings file to check; default $BROKER_LEDGER_SETTINGS, else settings/demo.toml.
    """
    path = file or settings_path()
    loaded = settings_or_none(path)
    if loaded is None:
        return USAGE_ERROR
    settings = loaded.ledger
    from application.adapters.addresses import Bip32AddressBook  # slow to import: only this command needs it

    try:
        Bip32AddressBook(settings.cryptos)
    except ValueError as error:
        return fail(f"{path}: {error}")
    print(f"{path}: OK")
    print(f"base currency:   {settings.base_currency}")
    print(f"currencies:      {', '.join(sorted(settings.currencies))}")
    print(f"cryptos:         {', '.join(sorted(settings.cryptos))}")
    print(f"trust levels:    {', '.join(sorted(settings.trust_levels))}")
    print(f"payment methods: {', '.join(sorted(settings.payment_methods))}")
    print(f"partners:        {len(settings.partners)} ({', '.join(sorted(settings.partners))})")
    print(f"clients:         {len(loaded.clients())}")
    print(f"price source:    {settings.price_source.kind}")
    return 0


@app.command(name="token")
def token(*, client: str, scope: str | None = None, settings: SettingsOption = None) -> int:
    """Print an access token for a configured client, signed with the server's key.

    For curl: TOKEN=$(broker-ledger token --client demo-broker). The key is the one `serve` keeps in
    $BROKER_LEDGER_VAR (default ./var) or $BROKER_LEDGER_TOKEN_KEY; without one it refuses, and it never
    makes one (stderr says which key it used).

    Parameters
    ----------
    client
        Client id, as configured in a partner's clients in the settings.
    scope
        Space-separated roles to put in the token; default all roles of the client.
    """
    loaded = settings_or_none(settings)
    if loaded is None:
        return USAGE_ERROR
    configured = loaded.clients().get(client)
    if configured is None:
        known = ", ".join(sorted(loaded.clients())) or "none"
        return fail(f"unknown client {client!r}; configured clients: {known}")
    try:
        key = stored_token_key(var_dir())
    except CredentialsError as error:
        return fail(str(error))
    service = TokenService(loaded.api.tokens, key.key, SystemClock())
    # minting needs no secret, so the record's hash is left empty
    record = ClientRecord(
        client_id=client, partner=configured.partner, roles=configured.roles, secret_hash=""
    )
    try:
        issued = service.issue(record, scope)
    except InvalidScope as error:
        return fail(error.reason)
    print(f"signed with the key in {key.source}", file=sys.stderr)
    print(issued.access_token)
    return 0


app.command("interface.serve:serve", name="serve")
app.command("interface.projections_cli:app", name="projections")
app.command("interface.audit_cli:app", name="audit")
app.command("interface.analyst_cli:app", name="analyst")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point; exits with the command's exit code."""
    # libpq's default application_name: every connection of the command (and of its workers) says it is ours
    os.environ.setdefault("PGAPPNAME", APP_NAME)
    app(list(argv) if argv is not None else None)


if __name__ == "__main__":
    main()
