"""The order desk's callback-URL port: the resolving policy the service wires judges a host name by the
addresses it resolves to; the static rules, the ledger's default without it, do no I/O and do not."""

from __future__ import annotations

import pytest

from application.adapters.prices import FixedPrices
from application.orders import OrderDesk
from application.ports import CallbackUrlCheck
from application.settings import DEFAULT_SETTINGS, load_settings
from bench.clock import FakeClock
from domain.callback_urls import CallbackUrlRules
from domain.errors import CallbackUrlRefused
from projections.callbacks.urls import CallbackUrlPolicy

ANSWERS = {"rebind.partner.example": ["10.1.2.3"]}
SETTINGS = load_settings(DEFAULT_SETTINGS)


@pytest.mark.parametrize(
    ("check", "refused"),
    [(CallbackUrlPolicy(resolver=lambda host, port: ANSWERS[host]), True), (CallbackUrlRules(), False)],
)
def test_only_the_resolving_policy_refuses_a_host_name_by_its_addresses(
    check: CallbackUrlCheck, refused: bool
) -> None:
    desk = OrderDesk(SETTINGS, FixedPrices(SETTINGS, FakeClock()), callback_urls=check)
    url = "https://rebind.partner.example/hook"
    if refused:
        with pytest.raises(CallbackUrlRefused, match=r"non-public address 10\.1\.2\.3"):
            desk.callback_url(url, "BANK_EUR_BUY")
    else:
        assert desk.callback_url(url, "BANK_EUR_BUY") == url
