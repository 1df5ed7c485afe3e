"""README.md's "A first buy and sell with curl" runs against the real server and every answer is what the
README says: an active customer, a staged buy, a sell of 0.0025 BTC paying out 143.66 EUR, its payment
confirmed (ToPayout) and its payout (COMPLETED)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from decimal import Decimal
from typing import Any

from tests.e2e.support import ROOT

README = ROOT / "README.md"
PROVIDED = re.compile(r"^(BASE|TOKEN|OPERATOR)=.*$", re.MULTILINE)  # the test sets these itself


def curl_block() -> str:
    text = README.read_text()
    section = text[text.index("## A first buy and sell with curl") :]
    return re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)


def answers(printed: str) -> list[dict[str, Any]]:
    """The JSON documents curl printed one after the other."""
    decoder, found, at = json.JSONDecoder(parse_float=Decimal), [], 0
    while (at := _skip_space(printed, at)) < len(printed):
        value, at = decoder.raw_decode(printed, at)
        found.append(value)
    return found


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def test_the_readme_curl_walk_through_answers_as_it_says(base_url: str, tokens: dict[str, str]) -> None:
    customer = f"alice-readme-{secrets.token_hex(4)}"
    script = re.sub(r"\balice\b", customer, PROVIDED.sub("", curl_block()))
    script = script.replace("payment-1", f"payment-{customer}")
    env = dict(os.environ, BASE=base_url, TOKEN=tokens["demo-broker"], OPERATOR=tokens["demo-operator"])
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr

    created, buy, sell, confirmed, paid = answers(done.stdout)
    assert "transaction" in buy, buy
    assert (created["customerCode"], created["status"]) == (customer, "ACTIVE")
    assert (buy["transaction"]["type"], buy["transaction"]["status"]) == ("BROKERBUY", "Staged")
    assert "transaction" in sell, sell
    tx = sell["transaction"]
    assert (tx["type"], tx["status"], tx["customerCode"]) == ("BROKERSELL", "Initiated", customer)
    assert tx["destinationCryptoAddress"] != "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"
    assert tx["executedAmounts"] == {
        "cryptoAmount": Decimal("0.00250000"),
        "fiatValue": Decimal("143.66"),
        "cryptoPrice": Decimal("59000.00"),
    }
    fees = tx["fees"]
    assert (fees["bankFeeFiat"], fees["networkFeeFiat"], fees["partnerFeeFiat"]) == (
        Decimal("0.50"),
        Decimal("1.18"),
        Decimal("2.16"),
    )
    assert "143.66" in README.read_text() and "2.16 partner fee" in README.read_text()
    assert confirmed["transaction"]["status"] == "ToPayout"
    assert paid["transaction"]["status"] == "COMPLETED"
    assert paid["transaction"]["transactionCode"] == tx["transactionCode"]
