"""Part of the postings check of `audit verify`: no reserve that must not be negative is below zero, in any
partner's books.

Reserves are each partner's own book: a partner's operator's reserves (every name but the built-in
`hot-wallet` and `bank`) move only by its adjustments, and a move never takes one below zero
(`domain.reserves.ReserveBook`, one per partner and asset), so a negative one means the ledger was written
past that rule. The built-in reserves are drawn by the partner's trades whatever they hold (a buy's sendout,
a sell's payout), and may legitimately show below zero; they are not checked here.
"""

from __future__ import annotations

from psycopg.sql import SQL, Identifier

from domain.reserves import may_go_negative
from projections.audit_sql import Connection, table_exists
from projections.posting_rules import RESERVE_PREFIX

BALANCES_TABLE = "balances"


def negative_reserves(conn: Connection, schema: str) -> list[str]:
    """One line per partner, reserve and asset that must not be negative and is (none without the balances
    table)."""
    if not table_exists(conn, schema, BALANCES_TABLE):
        return []
    rows = conn.execute(
        SQL(
            "SELECT partner, account, currency_code, balance FROM {} WHERE account LIKE %s AND balance < 0 "
            "ORDER BY partner, account, currency_code"
        ).format(Identifier(schema, BALANCES_TABLE)),
        (RESERVE_PREFIX.replace("_", r"\_") + "%",),
    ).fetchall()
    found = []
    for row in rows:
        name = row["account"].removeprefix(RESERVE_PREFIX)
        if may_go_negative(name):
            continue
        found.append(
            f"reserve {name} of partner {row['partner']} holds {row['balance']} {row['currency_code']}: "
            "below zero, which no move may leave it (only the built-in hot-wallet and bank may be drawn "
            "below zero, by trades)"
        )
    return found
