"""`COMMENT ON` every table, view and column of the read schema, taken from docs/analytics.md, the one source:
what a BI tool shows of a column is what the guide says of it (tests/projections/test_read_comments.py keeps
them equal).

The guide describes a relation under a heading that names it (`### \\`read.transactions\\`: one current row
per buy or sell`; a heading may name several, which share its column table) followed by a table whose first
column names columns (`| \\`partner\\`, \\`transaction_code\\` | text | key |`): the heading's text after the
names is the relation's comment, a row's last cell the comment of each column it names. A table whose first
header is `Table` lists relations of one kind (the projections' positions): each gets the row's other cells
as its comment and the column table after it. Backticks are left out of comments.

`describe` looks before it changes anything: `COMMENT ON` takes a lock on its table (SHARE UPDATE EXCLUSIVE,
which waits for no reader nor writer but for a vacuum or another DDL), so only a comment that differs from
the guide's is written. In a checkout the guide is docs/analytics.md itself; an installed wheel carries it as
`projections/analytics.md` (pyproject.toml).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier, Literal

from projections.base.postgres import READ_SCHEMA

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "analytics.md"
PACKAGED_GUIDE = "analytics.md"
HEADING = re.compile(r"^#{2,4} (.*)$")
NAMED = re.compile(r"`read\.(\w+)`")
CODE = re.compile(r"`(\w+)`")


@dataclass
class Relation:
    """What the guide says of a table or view: its comment and its columns'."""

    comment: str
    columns: dict[str, str] = field(default_factory=dict)


def guide_text() -> str:
    if GUIDE.is_file():
        return GUIDE.read_text()
    return resources.files("projections").joinpath(PACKAGED_GUIDE).read_text()


def plain(text: str) -> str:
    return text.replace("`", "").strip()


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@functools.cache
def described(text: str | None = None) -> dict[str, Relation]:
    """Every relation of the read schema the guide describes with a column table, by name."""
    found: dict[str, Relation] = {}
    named: list[str] = []  # the relations the current heading (or listing table) names
    heading = ""
    lines = (text if text is not None else guide_text()).splitlines()
    for number, line in enumerate(lines):
        if match := HEADING.match(line):
            heading = match.group(1)
            named = NAMED.findall(heading.split(":", 1)[0]) if heading.startswith("`read.") else []
            about = plain(heading.split(":", 1)[1]) if ":" in heading else ""
            for name in named:
                found.setdefault(name, Relation(about))
            continue
        if not line.startswith("| ") or number + 1 >= len(lines) or not lines[number + 1].startswith("|---"):
            continue
        if line.startswith("| Table |"):  # a listing of relations, then their column table
            named = _listed(lines[number + 2 :], found, plain(heading))
        elif line.startswith("| Column |"):
            for row in _rows(lines[number + 2 :]):
                for name in named:
                    for column in CODE.findall(row[0]):
                        found[name].columns[column] = plain(row[-1])
    return found


def _rows(lines: list[str]) -> list[list[str]]:
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return rows


def _listed(lines: list[str], found: dict[str, Relation], heading: str) -> list[str]:
    """The relations of a `| Table | ... |` listing, each with a comment of the listing's other cells."""
    names = []
    for row in _rows(lines):
        for name in NAMED.findall(row[0]):
            found[name] = Relation(f"{heading}: " + "; ".join(plain(cell) for cell in row[1:]))
            names.append(name)
    return names


CURRENT = """SELECT c.relname, a.attname, d.description
FROM pg_class AS c
LEFT JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_description AS d ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass
     AND d.objsubid = coalesce(a.attnum, 0)
WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
UNION ALL
SELECT c.relname, NULL, d.description
FROM pg_class AS c
LEFT JOIN pg_description AS d ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0
WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')"""


def current_comments(
    conn: psycopg.Connection[Any], schema: str = READ_SCHEMA
) -> dict[tuple[str, str | None], str | None]:
    """The comments of `schema`'s relations (column None) and of their columns, as they are."""
    rows = conn.execute(CURRENT, {"schema": schema}).fetchall()
    return {(str(row[0]), row[1] and str(row[1])): row[2] for row in rows}


def describe(conn: psycopg.Connection[Any], schema: str = READ_SCHEMA) -> int:
    """Comments every relation of `schema` that the guide describes, and each of its columns it describes,
    with the guide's text, where the comment differs; returns how many comments were written."""
    current = current_comments(conn, schema)
    written = 0
    for name, relation in described().items():
        table = Identifier(schema, name)
        kind = _kind(conn, schema, name) if (name, None) in current else None
        if kind is None:
            continue
        wanted = {(name, None): relation.comment}
        wanted.update({(name, column): text for column, text in relation.columns.items()})
        for key, text in wanted.items():
            if key not in current or current[key] == text:
                continue
            target = (
                SQL("COLUMN {}").format(Identifier(schema, name, key[1]))
                if key[1]
                else SQL("{} {}").format(SQL(kind), table)
            )
            conn.execute(SQL("COMMENT ON {} IS {}").format(target, Literal(text)))
            written += 1
    return written


def _kind(conn: psycopg.Connection[Any], schema: str, name: str) -> str | None:
    row = conn.execute(
        "SELECT relkind FROM pg_class WHERE relnamespace = %s::regnamespace AND relname = %s", (schema, name)
    ).fetchone()
    if row is None:
        return None
    return {"v": "VIEW", "m": "MATERIALIZED VIEW"}.get(str(row[0]), "TABLE")
