"""Reports of the blockchain watcher: a deposit seen at an address, a sendout's confirmations."""

from __future__ import annotations

from typing import Annotated

import msgspec

from interface.http.shapes import (
    Address,
    Amount,
    Body,
    Code,
    CryptoCode,
)

# A blockchain's transaction id: any text without white space (`"t-1\n"` would be a second report of t-1). The
# white space is spelled out, the union of what Python's `\s` and ECMA-262's `\s` match, so that the pattern
# the API document shows refuses exactly what the service refuses (`\x1c` is space to Python, not to ECMA).
TX_ID_PATTERN = r"^[^\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+\Z"
TxId = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=TX_ID_PATTERN)]


class ChainDeposit(Body):
    crypto_code: CryptoCode
    address: Address
    tx_id: TxId
    crypto_amount: Amount
    confirmations: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


class ChainSendout(Body):
    transaction_code: Annotated[str, Code]
    tx_id: TxId
    confirmations: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
