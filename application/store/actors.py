"""Who caused an event: its actor, recorded with every event the ledger stores (issue 40, "who did what").

An actor is a small mapping of text, stored in the event's state under the reserved key `_by_` (beside the
format's `_v_`, `application.store.msgspec_mapper`), so the audit chain and the Merkle tree, which hash the
stored bytes, cover it. Three kinds:
- `http`: the API client that made the request (`client`), its roles (`roles`, comma-separated) and the
  request's id (`request`, the `X-Request-Id` of the answer and of the access log line);
- `service`: a decision of the service itself (`component`: the expiry sweeper);
- `process`: a write made without a request by a process (`user`, the operating-system user, and `command`,
  the program and its subcommand), such as the command line.
A save names its actor with the request's writes (`RequestWrites.actor`); a save without one is the process's
(`PROCESS_ACTOR`). The library's own events of a save (snapshots) carry none."""

from __future__ import annotations

import getpass
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ACTOR_KEY = "_by_"  # where an event's actor is, in its state and as its attribute
Actor = Mapping[str, str]


def http_actor(client: str, roles: Iterable[str], request: str | None) -> Actor:
    return {"kind": "http", "client": client, "roles": ",".join(sorted(roles)), "request": request or ""}


def service_actor(component: str) -> Actor:
    return {"kind": "service", "component": component}


def process_actor(argv: list[str] | None = None) -> Actor:
    """This process: its user, and its program with the words of its subcommand (no option, nor any value
    that could be a secret)."""
    argv = sys.argv if argv is None else argv
    words = [Path(argv[0]).name if argv else "python"]
    words += [word for word in argv[1:3] if word and not word.startswith("-")]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container's)
        user = "unknown"
    return {"kind": "process", "user": user, "command": " ".join(words)}


PROCESS_ACTOR: Actor = process_actor()


def stamp(events: Iterable[Any], actor: Actor | None) -> None:
    """Records `actor` (this process's when None) on each event, to be stored with it."""
    who = PROCESS_ACTOR if actor is None else actor
    for event in events:
        object.__setattr__(event, ACTOR_KEY, who)


def actor_of(event: Any) -> Actor | None:
    """The actor an event was stored with, None for one stored before actors were (or a snapshot)."""
    return getattr(event, ACTOR_KEY, None)
