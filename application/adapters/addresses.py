"""Deposit addresses from account-level extended public keys; checks of customers' addresses.

Deposit address number `index` of a crypto is the external-chain child `<derivation_path>/0/<index>`
of the configured account key: BTC and LTC as native segwit P2WPKH (bech32), ETH as an EIP-55
checksummed address. bip-utils does the key derivation and the address decoding.

Address checks verify the checksum and the network (mainnet only):
- BTC: segwit v0 P2WPKH and P2WSH (bech32), v1 taproot (bech32m), base58 P2PKH "1..." and
  P2SH "3...".
- LTC: segwit v0 P2WPKH and P2WSH "ltc1..." (bech32), base58 P2PKH "L..." and P2SH "M..." (0x32).
  The deprecated LTC P2SH form with Bitcoin's version byte ("3...") is refused: it cannot be told
  apart from a Bitcoin address, and paying litecoin to a Bitcoin address (or the reverse) loses it.
- ETH: "0x" and 40 hex digits; mixed case must pass the EIP-55 checksum, one case is accepted.
So an address is valid for at most one crypto. Garbage input is invalid, never an exception.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from bip_utils import (
    Bip32PathParser,
    Bip44,
    Bip44Changes,
    Bip44Coins,
    Bip44DepthError,
    Bip44Levels,
    Bip84,
    Bip84Coins,
    CoinsConf,
    EthAddrDecoder,
    P2PKHAddrDecoder,
    P2SHAddrDecoder,
    SegwitBech32Decoder,
)

from application.ports import DerivedAddress
from application.settings import Crypto
from domain.errors import CryptoUnknown

MAX_ADDRESS_LENGTH = 90  # the longest bech32 string (BIP173); other addresses are shorter
HIGHEST_INDEX = 2**31 - 1  # higher indexes are hardened: a public key cannot derive them
_PATH_EXAMPLE = "m/84'/0'/0'"
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_BTC = CoinsConf.BitcoinMainNet
_LTC = CoinsConf.LitecoinMainNet
_BTC_WITNESS_PROGRAMS = frozenset({(0, 20), (0, 32), (1, 32)})  # (version, length in bytes)
_LTC_WITNESS_PROGRAMS = frozenset({(0, 20), (0, 32)})


def _decodes(decode: Callable[..., Any], address: str, **params: Any) -> bool:
    """Whether a bip-utils decoder accepts `address`; any exception it raises means no."""
    try:
        decode(address, **params)
    except Exception:
        return False
    return True


def _is_segwit(address: str, hrp: str, programs: frozenset[tuple[int, int]]) -> bool:
    """Bech32 for witness v0, bech32m from v1 (BIP350), and one of the allowed programs."""
    try:
        version, program = SegwitBech32Decoder.Decode(hrp, address)
    except Exception:
        return False
    return (version, len(program)) in programs


def _is_base58(address: str, p2pkh_version: bytes, p2sh_version: bytes) -> bool:
    return _decodes(P2PKHAddrDecoder.DecodeAddr, address, net_ver=p2pkh_version) or _decodes(
        P2SHAddrDecoder.DecodeAddr, address, net_ver=p2sh_version
    )


@functools.lru_cache(maxsize=16384)  # a customer's address comes back with each of their requests
def _is_address_of(crypto: str, address: str) -> bool:
    _, _, is_address = _NETWORKS[crypto]
    return is_address(address)


def is_bitcoin_address(address: str) -> bool:
    return _is_segwit(address, _BTC.ParamByKey("p2wpkh_hrp"), _BTC_WITNESS_PROGRAMS) or _is_base58(
        address, _BTC.ParamByKey("p2pkh_net_ver"), _BTC.ParamByKey("p2sh_net_ver")
    )


def is_litecoin_address(address: str) -> bool:
    return _is_segwit(address, _LTC.ParamByKey("p2wpkh_hrp"), _LTC_WITNESS_PROGRAMS) or _is_base58(
        address, _LTC.ParamByKey("p2pkh_std_net_ver"), _LTC.ParamByKey("p2sh_std_net_ver")
    )


def is_ethereum_address(address: str) -> bool:
    digits = address[2:]
    if not address.startswith("0x") or len(digits) != 40 or not _HEX_DIGITS.issuperset(digits):
        return False
    single_case = digits in (digits.lower(), digits.upper())
    return _decodes(EthAddrDecoder.DecodeAddr, address, skip_chksum_enc=single_case)


# Code -> (class and coin of the account key, address check). Exactly these codes are supported.
_NETWORKS: dict[str, tuple[type[Bip44] | type[Bip84], Any, Callable[[str], bool]]] = {
    "BTC": (Bip84, Bip84Coins.BITCOIN, is_bitcoin_address),
    "ETH": (Bip44, Bip44Coins.ETHEREUM, is_ethereum_address),
    "LTC": (Bip84, Bip84Coins.LITECOIN, is_litecoin_address),
}


def external_chain(code: str, crypto: Crypto) -> Bip44 | Bip84:
    """The change-0 node of `crypto`'s account key; `ValueError` naming `code` if it is unusable."""
    if code not in _NETWORKS:
        supported = ", ".join(sorted(_NETWORKS))
        raise ValueError(f"cryptos.{code}: no address support for this code (only {supported})")
    bip_class, coin, _ = _NETWORKS[code]
    field = f"cryptos.{code}.extended_public_key"
    try:
        account = bip_class.FromExtendedKey(crypto.extended_public_key, coin)
    except Bip44DepthError:
        account = None
    except Exception as error:
        raise ValueError(f"{field} is not a {code} extended public key ({error})") from None
    if account is not None and not account.IsPublicOnly():
        raise ValueError(f"{field} is a private key; configure the account's public key")
    if account is None or not account.IsLevel(Bip44Levels.ACCOUNT):
        raise ValueError(f"{field} is not an account-level key (depth 3, like {_PATH_EXAMPLE})")
    _check_path_matches_key(code, crypto.derivation_path, account)
    return account.Change(Bip44Changes.CHAIN_EXT)


def _check_path_matches_key(code: str, derivation_path: str, account: Bip44 | Bip84) -> None:
    """Recorded paths are only true if the configured path is the key's (depth and last index)."""
    field = f"cryptos.{code}.derivation_path {derivation_path!r}"
    try:
        path = Bip32PathParser.Parse(derivation_path)
    except Exception:
        path = None
    if path is None or not path.IsAbsolute() or path.Length() == 0:
        raise ValueError(f"{field} is not a path like {_PATH_EXAMPLE}")
    depth, index = account.Bip32Object().Depth().ToInt(), account.Bip32Object().Index().ToInt()
    if path.Length() != depth or path[-1].ToInt() != index:
        raise ValueError(f"{field} does not match the extended key (depth {depth}, last index {index})")


class Bip32AddressBook:
    """`AddressBook` over the configured cryptos; each account key is parsed once, up front."""

    def __init__(self, cryptos: Mapping[str, Crypto]) -> None:
        self._chains = {code: external_chain(code, crypto) for code, crypto in cryptos.items()}
        self._paths = {code: crypto.derivation_path for code, crypto in cryptos.items()}

    def derive(self, crypto: str, index: int) -> DerivedAddress:
        chain = self._chains.get(crypto)
        if chain is None:
            known = ", ".join(sorted(self._chains)) or "none"
            raise CryptoUnknown(f"Unknown crypto-currency {crypto!r} (configured: {known})")
        if not 0 <= index <= HIGHEST_INDEX:
            raise ValueError(f"address index must be between 0 and {HIGHEST_INDEX}, not {index}")
        address = chain.AddressIndex(index).PublicKey().ToAddress()
        return DerivedAddress(address=address, path=f"{self._paths[crypto]}/0/{index}")

    def is_valid(self, crypto: str, address: str) -> bool:
        """False for garbage and for cryptos that are not configured; never raises."""
        if crypto not in self._chains or not isinstance(address, str):
            return False
        if not 0 < len(address) <= MAX_ADDRESS_LENGTH:
            return False
        return _is_address_of(crypto, address)

    def cryptos_for(self, address: str) -> list[str]:
        return sorted(code for code in self._chains if self.is_valid(code, address))
