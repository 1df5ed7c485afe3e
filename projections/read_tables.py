"""The tables of the read models (schema `read` unless told otherwise), as `docs/analytics.md` describes them.

Every row is scoped by partner: primary keys start with it, as codes are unique per partner only. Each row
keeps the `version` of its aggregate and the `notification_id` of the event that last changed it, so a
reader can tell how fresh it is and an event applied a second time changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any, get_args, get_origin, get_type_hints
from uuid import UUID

from psycopg.sql import SQL, Composed, Identifier, Literal

from domain.transaction_view import FIELDS as TRANSACTION_FIELDS
from domain.transaction_view import TransactionView
from projections.dimensions import ASSETS, dimension_statements
from projections.partner_policies import mapping_statements, partner_rows

TABLES = ("customers", "accounts", "transactions", "transaction_status_history", "daily_volumes")
VIEWS = ("monthly_volumes",)

VOLUME_SUMS = (
    "fiat_value",
    "crypto_amount",
    "partner_fee_fiat",
    "bank_fee_fiat",
    "network_fee_fiat",
    "fees_fiat",
    "fees_crypto",
)

CUSTOMERS = """CREATE TABLE IF NOT EXISTS {customers} (
    partner text NOT NULL,
    customer_code text NOT NULL,
    id uuid NOT NULL UNIQUE,
    trust_level text NOT NULL,
    status text NOT NULL,
    currency_code text,
    portfolio_code text,
    account_count integer NOT NULL DEFAULT 0,
    created timestamptz NOT NULL,
    updated timestamptz NOT NULL,
    activated timestamptz,
    version integer NOT NULL,
    notification_id bigint NOT NULL,
    PRIMARY KEY (partner, customer_code))"""

ACCOUNTS = """CREATE TABLE IF NOT EXISTS {accounts} (
    partner text NOT NULL,
    account_code text NOT NULL,
    id uuid NOT NULL UNIQUE,
    customer_code text NOT NULL,
    crypto_code text NOT NULL,
    customer_address text NOT NULL,
    deposit_address text NOT NULL,
    deposit_path text NOT NULL,
    status text NOT NULL,
    created timestamptz NOT NULL,
    version integer NOT NULL,
    notification_id bigint NOT NULL,
    PRIMARY KEY (partner, account_code))"""

# `read.transactions` has a column per field of `TransactionView`, in its order, of the field's SQL type (NOT
# NULL unless the field may be None), and the row's own bookkeeping: `previous_status` after `status`, then
# `version` and `notification_id`.
SQL_TYPES = {
    str: "text",
    int: "integer",
    Decimal: "numeric",
    datetime: "timestamptz",
    UUID: "uuid",
    dict: "jsonb",
}
COLUMN_EXTRAS = {"id": " UNIQUE", "data": " DEFAULT '{{}}'"}
ROW_COLUMNS_AFTER = {"status": ("previous_status text",)}
ROW_COLUMNS = ("version integer NOT NULL", "notification_id bigint NOT NULL")


def column_definition(name: str, annotation: Any) -> str:
    """A view field's column: `name type [NOT NULL]` (an optional field is nullable)."""
    args = get_args(annotation)
    nullable = type(None) in args
    kind = next(a for a in args if a is not type(None)) if nullable else annotation
    sql_type = SQL_TYPES[get_origin(kind) or kind]
    return f"{name} {sql_type}{'' if nullable else ' NOT NULL'}{COLUMN_EXTRAS.get(name, '')}"


def transactions_table() -> str:
    hints = get_type_hints(TransactionView)
    columns: list[str] = []
    for name in TRANSACTION_FIELDS:
        columns += [column_definition(name, hints[name]), *ROW_COLUMNS_AFTER.get(name, ())]
    columns += [*ROW_COLUMNS, "PRIMARY KEY (partner, transaction_code)"]
    return "CREATE TABLE IF NOT EXISTS {transactions} (\n    " + ",\n    ".join(columns) + ")"


TRANSACTIONS = transactions_table()
# the columns added after the table was first released, added to a table made before them (each only if
# missing: a look at the catalog takes no lock, `ALTER TABLE` would take the table's whole)
ADDED_TRANSACTION_COLUMNS = (
    "resolution",
    "resolution_reason",
    "refund_address",
    "refund_crypto_amount",
    "refund_network_fee",
    "refund_tx_id",
)


def added_columns(table: Identifier) -> Composed:
    hints = get_type_hints(TransactionView)
    adds = [
        SQL(
            "IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = {name}::regclass AND attname = {column}"
            " AND NOT attisdropped) THEN ALTER TABLE {table} ADD COLUMN "
            + column_definition(name, hints[name])
            + "; END IF; "
        ).format(name=Literal(table.as_string()), column=Literal(name), table=table)
        for name in ADDED_TRANSACTION_COLUMNS
    ]
    return SQL("DO $added$ BEGIN {} END $added$").format(SQL("").join(adds))


STATUS_HISTORY = """CREATE TABLE IF NOT EXISTS {transaction_status_history} (
    partner text NOT NULL,
    transaction_code text NOT NULL,
    version integer NOT NULL,
    from_status text,
    to_status text NOT NULL,
    at timestamptz NOT NULL,
    event_type text NOT NULL,
    notification_id bigint NOT NULL,
    PRIMARY KEY (partner, transaction_code, version))"""

DAILY_VOLUMES = """CREATE TABLE IF NOT EXISTS {daily_volumes} (
    partner text NOT NULL,
    day date NOT NULL,
    customer_code text NOT NULL,
    payment_method_code text NOT NULL,
    type text NOT NULL,
    currency_code text NOT NULL,
    crypto_code text NOT NULL,
    count bigint NOT NULL,
    fiat_value numeric NOT NULL,
    crypto_amount numeric NOT NULL,
    partner_fee_fiat numeric NOT NULL,
    bank_fee_fiat numeric NOT NULL,
    network_fee_fiat numeric NOT NULL,
    fees_fiat numeric NOT NULL,
    fees_crypto numeric NOT NULL,
    PRIMARY KEY (partner, day, customer_code, payment_method_code, type, currency_code, crypto_code))"""

# as the querying role (`security_invoker`): its owner's rights would bypass the tables' partner policies.
# Amounts at their asset's scale (`read.assets`' places: fiat sums at the currency's, crypto sums at the
# crypto-currency's); an asset the settings no longer name keeps its sums as they are.
FIAT_SUMS = tuple(name for name in VOLUME_SUMS if name.endswith("_fiat") or name == "fiat_value")


def at_scale(amount: str, places: str) -> str:
    """SQL of `amount` at `places` decimal places, or as it is when `places` is unknown (NULL)."""
    return f"CASE WHEN {places} IS NULL THEN {amount} ELSE round({amount}, {places}) END"


MONTHLY_SUMS = ", ".join(
    f"{at_scale(f'sum(v.{name})', 'f.places' if name in FIAT_SUMS else 'c.places')} AS {name}"
    for name in VOLUME_SUMS
)
MONTHLY_VOLUMES = (
    """CREATE OR REPLACE VIEW {monthly_volumes} WITH (security_invoker = true) AS
SELECT v.partner, date_trunc('month', v.day)::date AS month, v.customer_code, v.payment_method_code, v.type,
       v.currency_code, v.crypto_code, sum(v.count)::bigint AS count, """
    + MONTHLY_SUMS.replace("{", "{{").replace("}", "}}")
    + """
FROM {daily_volumes} AS v
LEFT JOIN {assets} AS f ON f.asset_code = v.currency_code
LEFT JOIN {assets} AS c ON c.asset_code = v.crypto_code
GROUP BY v.partner, date_trunc('month', v.day)::date, v.customer_code, v.payment_method_code, v.type,
         v.currency_code, v.crypto_code, f.places, c.places"""
)

INDEXES = (  # (name, table, columns)
    ("transactions_by_created", "transactions", "partner, created DESC"),
    ("transactions_by_customer", "transactions", "partner, customer_code, created DESC"),
    ("transactions_by_status", "transactions", "partner, status"),
    ("accounts_by_customer", "accounts", "partner, customer_code"),
    ("status_history_by_at", "transaction_status_history", "partner, at"),
)


def create_statements(table: Callable[[str], Identifier]) -> list[Composed]:
    """CREATE statements of every table, index and view, names qualified by `table`, and each table's
    partner policy (`projections.partner_policies`)."""
    names = {name: table(name) for name in (*TABLES, *VIEWS, ASSETS)}
    statements = mapping_statements(table)
    statements += dimension_statements(table)  # `read.assets` before the views that scale by it
    statements += [
        SQL(text).format(**names)
        for text in (CUSTOMERS, ACCOUNTS, TRANSACTIONS, STATUS_HISTORY, DAILY_VOLUMES, MONTHLY_VOLUMES)
    ]
    statements.append(added_columns(names["transactions"]))
    statements += [
        SQL("CREATE INDEX IF NOT EXISTS {} ON {} (" + columns + ")").format(Identifier(name), names[on])
        for name, on, columns in INDEXES
    ]
    statements += [partner_rows(table, name) for name in TABLES]
    return statements
