"""How the console answers: HTML pages rendered from its templates, each with headers that keep a browser
strict (a Content-Security-Policy that allows no inline script nor any other site's, no framing, no caching
of a partner's figures), and the refusals of the API shown as pages rather than problem documents: those of
its routes, and those the app answers before any route is found under /console (an unknown path, a method a
page does not take)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from litestar import Request, Response
from litestar.exceptions import NotFoundException
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, Template
from litestar.template.config import TemplateConfig
from litestar_htmx import ClientRedirect

from interface.http.problems import EXCEPTION_HANDLERS, Problem

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
PATH = "/console"
SIGN_IN = "/console/sign-in"
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "object-src 'none'",
    ]
)
# what the text fields of days and instants take (HTML `pattern`s, whole values): a UTC day; an instant in UTC
# to the minute or second (`Z` optional), or with an offset and a fraction, as the timeline's links give it
DAY_PATTERN = "[0-9]{4}-[0-9]{2}-[0-9]{2}"
INSTANT_PATTERN = (
    "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\\.[0-9]{1,6})?)?(Z|[+\\-][0-9]{2}:[0-9]{2})?"
)
KEPT_HEADERS = ("retry-after", "allow")  # of the API's answer to an error, those its page keeps
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # not no-referrer: a form posted under it says `Origin: null`
    "Cache-Control": "no-store",
}


def template_config() -> TemplateConfig:
    """The console's templates (Jinja, escaping every value), which may name `utc` to show times in UTC, write
    amounts with `|amount` and instants with `|instant`, and give the text fields of days and instants their
    `DAY_PATTERN` and `INSTANT_PATTERN`."""

    def with_utc(engine: JinjaTemplateEngine) -> None:
        engine.engine.globals["utc"] = UTC
        engine.engine.globals["DAY_PATTERN"] = DAY_PATTERN
        engine.engine.globals["INSTANT_PATTERN"] = INSTANT_PATTERN
        engine.engine.filters["amount"] = written
        engine.engine.filters["instant"] = instant_text

    return TemplateConfig(directory=TEMPLATES, engine=JinjaTemplateEngine, engine_callback=with_utc)


def written(amount: Any) -> Any:
    """An amount as people write it: 0.00000000, never 0E-8."""
    return format(amount, "f") if isinstance(amount, Decimal) else amount


def instant_text(moment: datetime | None, timespec: str = "auto") -> str:
    """An instant as ISO 8601 in UTC, `2026-11-27T10:30:00Z` (with its fraction of a second when it has one,
    or to `timespec`), whatever the reader's locale; empty for None."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def page(name: str, status: int = 200, **context: Any) -> Template:
    """The template `name` rendered with `context`, as an HTML page with the console's headers."""
    return Template(template_name=name, context=context, status_code=status, headers=HEADERS)


def to_sign_in(request: Request, _: Exception) -> Response:
    """A request without a valid session is sent to sign in (htmx is told to load the page whole)."""
    if request.headers.get("hx-request"):
        return ClientRedirect(SIGN_IN)
    return Redirect(SIGN_IN, status_code=303, headers=HEADERS)


def as_page(answer_of: Callable[[Request, Any], Response[Problem]]) -> Callable[[Request, Any], Response]:
    """The API's handler `answer_of` (its status and message, logged as the API logs it), answering a page."""

    def refusal_page(request: Request, error: Exception) -> Response:
        answer = answer_of(request, error)
        problem: Problem = answer.content
        session = request.scope.get("console_session")
        kept = {key: value for key, value in (answer.headers or {}).items() if key.lower() in KEPT_HEADERS}
        title = problem.title
        shown = page("refusal.html", answer.status_code, session=session, problem=problem, heading=title)
        shown.headers.update(kept)
        return shown

    return refusal_page


def exception_handlers() -> dict[Any, Any]:
    """The console's: every error the API maps, answered by the API's own handler of it (litestar picks it,
    as for the API) and shown as a page of the same status and message."""
    return {kind: as_page(answer_of) for kind, answer_of in EXCEPTION_HANDLERS.items()}


def under_console(request: Request) -> bool:
    """Whether the request is for the console (its path, in any spelling, /console or under it)."""
    path = request.scope["path"].lower()
    return path == PATH or path.startswith(f"{PATH}/")


def with_console_pages(handlers: dict[Any, Any]) -> dict[Any, Any]:
    """The app's own `handlers` (of what happens before a route is found: an unknown path, a method the path
    does not take), each answering a console page, with the console's headers, under /console."""

    def either(answer_of: Callable[[Request, Any], Response[Problem]]) -> Callable[[Request, Any], Response]:
        shown = as_page(answer_of)

        def answer(request: Request, error: Exception) -> Response:
            if not under_console(request):
                return answer_of(request, error)
            if isinstance(error, NotFoundException) and error.detail == "Not Found":  # no route: no page
                return shown(request, NotFoundException(detail="the console has no page at this address"))
            return shown(request, error)

        return answer

    return {kind: either(answer_of) for kind, answer_of in handlers.items()}
