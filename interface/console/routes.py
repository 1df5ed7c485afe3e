"""`/console`: read-only pages for auditors and operators, signed in with their client credentials.

Each page admits the roles its API counterpart admits, among the console's two: the transaction search
(and its CSV file), timelines, reserves, volumes, reconciliation (and its CSV file) and system pages both
roles' (as the reading endpoints are), and the payout queue too (the operator acts on it; the page shows the
calls). Every page reads the signed-in partner's data
only. The forms are plain GET forms that work without
JavaScript; htmx (served from /console/static) only swaps the part of the page that changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date
from typing import Annotated, Any

from litestar import Request, Response, Router, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import PathParameter, QueryParameter
from litestar.response import Redirect, Template
from litestar.static_files import create_static_files_router
from litestar_htmx import HTMXRequest

from domain.errors import TransactionNotFound
from interface.console import downloads, pages
from interface.console.pages import HEADERS, page
from interface.console.periods import Days, day_of, end_of, instant_of, last_day_of, period_of, start_of
from interface.console.reading import ConsoleReader, DayChart
from interface.console.reconciling import REPORTS_SHOWN
from interface.console.sessions import ConsoleSessions, NotSignedIn, Session, SignInRefused
from interface.http.problems import ApiProblem
from interface.http.security import AUDITOR, OPERATOR
from interface.http.shapes import CODE_PATTERN
from interface.shared.query_parameters import STATUSES, one_of
from projections.queries import TransactionFilter

CODE = re.compile(CODE_PATTERN)
Query = Annotated[str | None, QueryParameter(required=False, max_length=64)]
FirstDay = Annotated[str | None, QueryParameter(name="from", required=False, max_length=10)]
LastDay = Annotated[str | None, QueryParameter(name="to", required=False, max_length=10)]
SessionDep = NamedDependency[Session]
SessionsDep = NamedDependency[ConsoleSessions]
ConsoleDep = NamedDependency[ConsoleReader]
# any text: a code that breaks the rules of codes names no transaction, and gets the page of one unknown
AnyCode = Annotated[str, PathParameter()]


async def signed_in(request: Request, sessions: SessionsDep) -> Session:
    """The request's session (a dependency of every page but sign-in); kept on the request for its errors."""
    session = await sessions.session_of(request)
    request.scope["console_session"] = session  # type: ignore[typeddict-unknown-key]
    return session


def admit(session: Session, *roles: str) -> None:
    """403 unless the session holds one of `roles`."""
    if not session.principal.roles & set(roles):
        raise ApiProblem(
            403,
            "forbidden",
            f"client {session.principal.client_id} lacks the role this page needs ({' or '.join(roles)})",
        )


@get("/sign-in")
async def sign_in_page(request: Request) -> Template:
    return page("sign_in.html", heading="Sign in", session=None, error=None, client_id="")


@post("/sign-in", status_code=303)
async def sign_in_form(request: Request, sessions: SessionsDep) -> Response:
    sessions.check_form_origin(request)
    form = await request.form()
    client_id, secret = str(form.get("client_id", "")).strip(), str(form.get("client_secret", ""))
    try:
        session, cookie = await sessions.sign_in(request, client_id, secret)
    except SignInRefused as refused:
        shown = page(
            "sign_in.html",
            refused.status,
            heading="Sign in",
            session=None,
            error=refused.message,
            client_id=client_id,
        )
        shown.headers.update(refused.headers)  # Retry-After of a 429
        return shown
    return Redirect(landing_of(session), status_code=303, headers=HEADERS, cookies=[cookie])


def landing_of(session: Session) -> str:
    """The first page of a session: the transactions for an auditor, the payout queue for an operator."""
    return "/console/transactions" if session.is_auditor else "/console/payouts"


@post("/sign-out", status_code=303)
async def sign_out(request: Request, sessions: SessionsDep) -> Response:
    sessions.check_form_origin(request)
    cookie = await sessions.sign_out(request)
    return Redirect(pages.SIGN_IN, status_code=303, headers=HEADERS, cookies=[cookie])


@get("/")
async def home(session: SessionDep) -> Response:
    return Redirect(landing_of(session), status_code=303, headers=HEADERS)


@get("/transactions", sync_to_thread=True)
def transactions(
    request: HTMXRequest,
    session: SessionDep,
    console: ConsoleDep,
    code: Query = None,
    customer: Query = None,
    status: Query = None,
    created_from: FirstDay = None,
    created_to: LastDay = None,
    page_number: Annotated[int, QueryParameter(name="page", ge=1, le=100_000)] = 1,
) -> Template:
    """The transaction search: by code, or by customer, status and days of creation."""
    admit(session, AUDITOR, OPERATOR)
    where = search_filter(customer, status, created_from, created_to)
    found = console.search(session.principal.partner, (code or "").strip(), where, page_number)
    query = {
        "code": code or "",
        "customer": customer or "",
        "status": status or "",
        "from": created_from or "",
        "to": created_to or "",
    }
    template = "_results.html" if request.htmx else "transactions.html"
    return page(
        template, heading="Transactions", session=session, found=found, query=query, statuses=STATUSES
    )


def search_filter(
    customer: str | None, status: str | None, created_from: str | None, created_to: str | None
) -> TransactionFilter:
    """The search's fields (each may be empty) as the filter of the partner's transactions."""
    first, last = day_of("from", created_from), last_day_of("to", created_to)
    return TransactionFilter(
        customer_code=customer or None,
        status=one_of("status", status or None, STATUSES),
        created_from=start_of(first) if first else None,
        created_to=end_of(last) if last else None,
    )


@get("/transactions.csv", sync_to_thread=True)
def transactions_file(
    session: SessionDep,
    console: ConsoleDep,
    code: Query = None,
    customer: Query = None,
    status: Query = None,
    created_from: FirstDay = None,
    created_to: LastDay = None,
) -> Response:
    """Every transaction the search finds (newest first, at most downloads.MOST_ROWS), as a CSV file."""
    admit(session, AUDITOR, OPERATOR)
    where = search_filter(customer, status, created_from, created_to)
    partner = session.principal.partner
    if (code or "").strip():
        found = console.search(partner, code.strip(), where, 1).transactions  # type: ignore[union-attr]
    else:
        found = console.every_transaction(partner, where, downloads.MOST_ROWS)
    return downloads.csv_file(downloads.transactions_csv(found), "transactions.csv")


@get("/transactions/{code:str}", sync_to_thread=True)
def timeline(
    request: HTMXRequest,
    session: SessionDep,
    console: ConsoleDep,
    code: AnyCode,
    at: Annotated[str | None, QueryParameter(name="at", required=False, max_length=40)] = None,
) -> Template:
    """A transaction's timeline, as it stood at `at` (now without one)."""
    admit(session, AUDITOR, OPERATOR)
    instant = instant_of(at)
    try:
        if not CODE.match(code):
            raise TransactionNotFound(f"no transaction with code {code!r}")
        shown = console.timeline(session.principal.partner, code, instant)
    except TransactionNotFound:  # another partner's transaction is as unknown as one never made
        return page("not_found.html", 404, heading=f"No transaction {code}", session=session, code=code)
    template = "_timeline.html" if request.htmx else "timeline.html"
    return page(template, heading=f"Transaction {code}", session=session, timeline=shown)


@get("/payouts", sync_to_thread=True)
def payouts(session: SessionDep, console: ConsoleDep) -> Template:
    """The payout queue: sells to pay out, blocked sells and late payments to resolve, refunds to send."""
    admit(session, OPERATOR, AUDITOR)
    queue = console.payout_queue(session.principal.partner)
    return page("payouts.html", heading="Payout queue", session=session, queue=queue)


@get("/reserves", sync_to_thread=True)
def reserves(
    session: SessionDep, console: ConsoleDep, first: FirstDay = None, last: LastDay = None
) -> Template:
    """Each reserve's total, locked and available now; and its total per asset at the end of each day of the
    period."""
    now = console.reserves_now(session.principal.partner)
    return charts_page(
        "reserves.html", "Reserves", console.reserve_charts, session, console, first, last, now=now
    )


@get("/volumes", sync_to_thread=True)
def volumes(
    session: SessionDep, console: ConsoleDep, first: FirstDay = None, last: LastDay = None
) -> Template:
    """The fiat volume of each day of the period per currency and payment method."""
    return charts_page("volumes.html", "Daily volumes", console.volume_charts, session, console, first, last)


def charts_page(
    template: str,
    heading: str,
    charts_of: Callable[[str, Days], list[DayChart]],
    session: Session,
    console: ConsoleReader,
    first: str | None,
    last: str | None,
    **more: Any,
) -> Template:
    """A page of charts over the period of the fields `from` and `to`, for auditors and operators (and
    `more` to show)."""
    admit(session, AUDITOR, OPERATOR)
    period = period_of(first, last, today(console))
    charts = charts_of(session.principal.partner, period)
    return page(template, heading=heading, session=session, period=period, charts=charts, **more)


@get("/reconciliation", sync_to_thread=True)
def reconciliation(
    session: SessionDep, console: ConsoleDep, first: FirstDay = None, last: LastDay = None
) -> Template:
    """The reconciliation of a period of days (as `GET /reconciliation`): reserves, reports, differences."""
    admit(session, AUDITOR, OPERATOR)
    period = period_of(first, last, today(console))
    done = console.reconciliation(session.principal.partner, period, REPORTS_SHOWN)
    return page("reconciliation.html", heading="Reconciliation", session=session, period=period, done=done)


@get("/reconciliation.csv", sync_to_thread=True)
def reconciliation_file(
    session: SessionDep, console: ConsoleDep, first: FirstDay = None, last: LastDay = None
) -> Response:
    """The reconciliation of the period as a CSV file: every reserve, report and difference."""
    admit(session, AUDITOR, OPERATOR)
    period = period_of(first, last, today(console))
    done = console.reconciliation(session.principal.partner, period, None)
    name = f"reconciliation-{period.first}-{period.last}.csv"
    return downloads.csv_file(downloads.reconciliation_csv(done), name)


@get("/system", sync_to_thread=True)
def system(session: SessionDep, console: ConsoleDep) -> Template:
    """The projections' positions, the audit chain's head and the last `audit verify`."""
    admit(session, AUDITOR, OPERATOR)
    return page("system.html", heading="System", session=session, system=console.system())


def today(console: ConsoleReader) -> date:
    """Today by the ledger's clock (the time base of every event), in UTC."""
    return console.reader.ledger.clock.now().astimezone(UTC).date()


def console_router() -> Router:
    """Every page of the console, its static files, and the handlers that turn errors into pages; the app
    hands its pages the `sessions` (`ConsoleSessions`) that sign in and out and find each page's session."""
    return Router(
        path="/console",
        route_handlers=[
            sign_in_page,
            sign_in_form,
            sign_out,
            home,
            transactions,
            transactions_file,
            timeline,
            payouts,
            reserves,
            volumes,
            reconciliation,
            reconciliation_file,
            system,
            create_static_files_router(path="/static", directories=[pages.STATIC], include_in_schema=False),
        ],
        dependencies={
            "session": Provide(signed_in),
            "console": Provide(ConsoleReader.of, sync_to_thread=False),
        },
        exception_handlers={**pages.exception_handlers(), NotSignedIn: pages.to_sign_in},
        request_class=HTMXRequest,
        include_in_schema=False,
    )
