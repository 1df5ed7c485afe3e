"""The `broker-ledger` console script.

Commands live next to what they drive and are registered here by import path, so that each loads
only when used (`serve` from `interface.cli.serve`; `projections`, `audit` and `analyst` from
`interface.cli.projections`, `interface.cli.audit` and `interface.cli.analyst`; `export` from
`interface.cli.export`; `backup` and `restore` from `interface.cli.backup`);
`settings check` and `token` are defined here.

A command returns its exit code: 0 for success, 2 for a problem the user can fix (said on stderr). Each
command reads the environment once, as it starts (`interface.environment.Environment.read`), and hands on
what it needs.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from application.credentials import ClientRecord, CredentialsError, stored_token_key
from application.ports import SystemClock
from application.settings import SettingsError
from application.store.database import ensure_schema, resolve_database_url
from application.store.log import EVENTS_SCHEMA
from interface.environment import Environment, name_connections
from interface.http.auth import InvalidScope, TokenService
from interface.http.settings import ServiceSettings, load_service_settings

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


def database_url(environment: Environment) -> str:
    """The database the service uses, as `serve` finds it: DATABASE_URL, else the embedded server's (started
    if need be), with the parts it leaves out that libpq's PG* variables give."""
    return environment.libpq.complete(resolve_database_url(environment.var_dir, environment.database_url))


def event_store_url(environment: Environment) -> str:
    """The database the service uses (`database_url`), with the event store's schema in place."""
    url = database_url(environment)
    ensure_schema(url, EVENTS_SCHEMA)
    return url


def unknown_partner(partner: str, partners: Iterable[str]) -> str | None:
    """Why `--partner` is refused (the settings do not name it), or None when they do."""
    if partner in partners:
        return None
    return f"unknown partner {partner!r}; configured: {', '.join(sorted(partners))}"


def settings_or_none(path: Path) -> ServiceSettings | None:
    """The settings at `path`, or None after printing each problem to stderr."""
    try:
        return load_service_settings(path)
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
    path = file or Environment.read().settings_file
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
    environment = Environment.read()
    loaded = settings_or_none(settings or environment.settings_file)
    if loaded is None:
        return USAGE_ERROR
    configured = loaded.clients().get(client)
    if configured is None:
        known = ", ".join(sorted(loaded.clients())) or "none"
        return fail(f"unknown client {client!r}; configured clients: {known}")
    try:
        key = stored_token_key(environment.var_dir, environment.token_key)
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


app.command("interface.cli.serve:serve", name="serve")
app.command("interface.cli.projections:app", name="projections")
app.command("interface.cli.audit:app", name="audit")
app.command("interface.cli.analyst:app", name="analyst")
app.command("interface.cli.export:export", name="export")
app.command("interface.cli.backup:app", name="backup")
app.command("interface.cli.backup:restore_command", name="restore")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point; exits with the command's exit code."""
    name_connections()  # every connection of the command (and of its workers) says it is ours
    app(list(argv) if argv is not None else None)


if __name__ == "__main__":
    main()
