"""Driving the web console in a real browser: Debian's Chromium, headless, through its chromedriver.

`Browser` wraps one Selenium driver for a module's tests: it opens the console's pages, follows forms and
links (whole page loads, or htmx's swaps in their place), signs in, types an instant into the instant field
(UTC ISO 8601 text), saves screenshots, and reads the browser's console. Every page check fails on any
SEVERE entry of the console (a script error, a Content-Security-Policy violation, an asset answered 404),
but for the one entry that an expected status of the page itself leaves ("... the server responded with a
status of 404"), which it then requires: a page expected to answer 404 is seen to answer 404.

Screenshots go to `var/test-output/console/<name>.png` (`var/` is ignored by git), or to
`$BROKER_LEDGER_TEST_OUTPUT/console/` when that is set; docs/console.md shows copies of them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
HOW_TO_INSTALL = (
    "The browser tests need Debian's Chromium and its driver at /usr/bin/chromium and /usr/bin/chromedriver: "
    "`apt-get install -y --no-install-recommends chromium chromium-driver` as root (scripts/test does it)."
)
OUTPUT_ENV = "BROKER_LEDGER_TEST_OUTPUT"
DEFAULT_OUTPUT = Path("var/test-output")  # under the repository; var/ is ignored by git
# No network of its own (updates, sync, QUIC probes), no GPU or sandbox a container lacks, /tmp rather than a
# small /dev/shm; its language is `start_chromium`'s (en-US unless a test asks for another).
ARGUMENTS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)
WAIT_SECONDS = 10
SERVER_ERROR = re.compile(r"status of 5\d\d")
STATUS_ENTRY = re.compile(
    r"^(?P<url>\S+) - Failed to load resource: the server responded with a status of (\d+)"
)


def output_folder() -> Path:
    """Where the console's screenshots are saved (created)."""
    chosen = os.environ.get(OUTPUT_ENV, "").strip()
    folder = ROOT / (chosen or DEFAULT_OUTPUT) / "console"  # a relative one from the repository's root
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def missing_browser() -> str | None:
    """Why no browser can be started here (what to install), or None."""
    absent = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    return f"{', '.join(absent)} missing. {HOW_TO_INSTALL}" if absent else None


def start_chromium(profile: Path, language: str = "en-US") -> webdriver.Chrome:
    """Headless Chromium with a fresh profile in `profile`, in `language` (its UI, its `Accept-Language` and
    `navigator.language`: the locale a date field would be shown in), keeping every entry of its console."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ARGUMENTS:
        options.add_argument(argument)
    options.add_argument(f"--lang={language}")
    options.add_experimental_option("prefs", {"intl.accept_languages": language})
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))


class ConsoleErrors(AssertionError):
    """The browser's console holds SEVERE entries (or lacks the one of an expected status)."""


def severe(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in entries if entry.get("level") == "SEVERE"]


class Browser:
    """One Selenium driver on the console of `base_url`."""

    def __init__(
        self,
        driver: webdriver.Chrome,
        base_url: str,
        output: Path,
        server_log: Callable[[], str] | None = None,
    ) -> None:
        self.driver = driver
        self.base_url = base_url
        self.output = output
        self.server_log = server_log  # the tail of the server's log, quoted when a page answers 5xx
        self.screenshots: list[Path] = []

    # --- the console's log ------------------------------------------------------------------------------

    def check_console(self, status: int = 200) -> None:
        """Reads (and so empties) the browser's console: any SEVERE entry fails, but for the entry that the
        current page's own `status` leaves when it is an error status, which must then be there."""
        entries = severe(self.driver.get_log("browser"))
        url = self.driver.current_url
        if status >= 400:
            own = [entry for entry in entries if _is_status_entry(entry, url, status)]
            if not own:
                found = "\n".join(entry["message"] for entry in entries) or "nothing"
                raise ConsoleErrors(
                    f"{url} was expected to answer {status}; the console holds: {found}{self._shown()}"
                )
            entries = [entry for entry in entries if entry not in own]
        if entries:
            listed = "\n".join(f"[{entry.get('source')}] {entry['message']}" for entry in entries)
            problem = f"the browser's console holds {len(entries)} SEVERE entries at {url}:\n{listed}"
            problem += self._shown()
            if self.server_log is not None and SERVER_ERROR.search(listed):
                problem += f"\nthe server's log ends with:\n{self.server_log()}"
            raise ConsoleErrors(problem)

    def _shown(self) -> str:
        """What the page says it is, and any alert on it, for a failure's message."""
        said = [element.text.strip() for element in self.finds("h1, [role=alert]") if element.text.strip()]
        return f"\nthe page shows: {' | '.join(said)}" if said else ""

    def forget_console(self) -> None:
        self.driver.get_log("browser")

    # --- pages ------------------------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    @property
    def path(self) -> str:
        """The current page's path and query, without the base URL."""
        current = self.driver.current_url
        return current[len(self.base_url) :] if current.startswith(self.base_url) else current

    def open(self, path: str, status: int = 200) -> None:
        """Loads `path` of the console (following redirects) and checks the console for `status`."""
        self.driver.get(self.url(path))
        self.settled()
        self.check_console(status)

    def follow(
        self, action: Callable[[], None], replaced: WebElement | None = None, status: int = 200
    ) -> None:
        """Does `action` (a click, a submit) and waits until `replaced` (by default the page's heading) is
        gone, whether the browser loaded a whole page or htmx swapped part of one; then checks the console."""
        replaced = replaced if replaced is not None else self.find("h1")
        action()
        WebDriverWait(self.driver, WAIT_SECONDS).until(lambda _: _is_stale(replaced))
        self.settled()
        self.check_console(status)

    def click(self, css: str, replaced: WebElement | None = None, status: int = 200) -> None:
        self.follow(self.find(css).click, replaced, status)

    def settled(self) -> None:
        """Waits for the document to be loaded and htmx to have nothing under way."""
        WebDriverWait(self.driver, WAIT_SECONDS).until(
            lambda driver: driver.execute_script(
                "return document.readyState === 'complete' && !document.querySelector('.htmx-request')"
            )
        )

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def finds(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def has(self, css: str) -> bool:
        return bool(self.finds(css))

    def text(self, css: str) -> str:
        return self.find(css).text.strip()

    @property
    def heading(self) -> str:
        return self.text("h1")

    @property
    def title(self) -> str:
        return self.driver.title.strip()

    def fill(self, css: str, value: str) -> None:
        field = self.find(css)
        field.clear()
        field.send_keys(value)

    def type_instant(self, css: str, instant: datetime) -> None:
        """Types `instant` (to the second, in UTC) into the instant field as a person does, as ISO 8601
        (`YYYY-MM-DDTHH:MM:SSZ`, whatever the browser's locale); the field must then hold it, valid."""
        typed = f"{instant.astimezone(UTC):%Y-%m-%dT%H:%M:%S}Z"
        self.fill(css, typed)
        field = self.find(css)
        assert field.get_attribute("value") == typed, f"the field holds {field.get_attribute('value')!r}"
        assert self.driver.execute_script("return arguments[0].checkValidity()", field), typed

    # --- signing in and out -----------------------------------------------------------------------------

    def sign_in(self, client_id: str, secret: str, status: int = 200) -> None:
        """Signs in through the sign-in form; `status` is the answer's (the page redirected to on success)."""
        self.open("/console/sign-in")
        self.fill("#client-id", client_id)
        self.fill("#client-secret", secret)
        self.click("#sign-in-submit", status=status)

    def sign_out(self) -> None:
        self.click("#sign-out-submit")

    def forget_session(self) -> None:
        """No cookie of any site left: the next page is seen as by someone who never signed in."""
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})

    # --- screenshots ------------------------------------------------------------------------------------

    def screenshot(self, name: str) -> Path:
        """The browser's window as `<output>/<name>.png`."""
        path = self.output / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), f"no screenshot saved to {path}"
        self.screenshots.append(path)
        return path


def _is_status_entry(entry: dict[str, Any], url: str, status: int) -> bool:
    match = STATUS_ENTRY.match(entry.get("message", ""))
    return match is not None and match.group("url") == url and int(match.group(2)) == status


def _is_stale(element: WebElement) -> bool:
    """Whether the element has left the document; while the page is being replaced, Chromium may say so as
    an inspector error rather than as a stale reference."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "does not belong to the document" in str(error):
            return True
        raise
    return False
