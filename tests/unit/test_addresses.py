"""Deposit addresses and address checks, against the demo keys of the BIP39 test mnemonic."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from application.adapters.addresses import HIGHEST_INDEX, Bip32AddressBook
from application.ports import AddressBook
from application.settings import Crypto, load_settings
from domain.errors import CryptoUnknown

BTC_FIRST = "bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu"
LTC_FIRST = "ltc1qjmxnz78nmc8nq77wuxh25n2es7rzm5c2rkk4wh"
ETH_FIRST = "0x9858EfFD232B4033E47d90003D41EC34EcaEda94"

VALID = {
    "BTC": [
        BTC_FIRST,
        BTC_FIRST.upper(),  # bech32 may be all upper case
        "bc1qrp33g0q5c5txsp9arysrx4k6zdkfs4nce4xj0gdcccefvpysxf3qccfmv3",  # P2WSH
        "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqzk5jj0",  # taproot, bech32m
        "1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN2",  # P2PKH
        "3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy",  # P2SH
    ],
    "LTC": [
        LTC_FIRST,
        "ltc1qqqqsyqcyq5rqwzqfpg9scrgwpugpzysnzs23v9ccrydpk8qarc0sp89z3m",  # P2WSH
        "LM2WMpR1Rp6j3Sa59cMXMs1SPzj9eXpGc1",  # P2PKH
        "MQMcJhpWHYVeQArcZR3sBgyPZxxRtnH441",  # P2SH, version 0x32
    ],
    "ETH": [ETH_FIRST, ETH_FIRST.lower(), "0x" + ETH_FIRST[2:].upper()],
}

INVALID = {
    "BTC": [
        BTC_FIRST[:-1] + "v",  # one character off: bad checksum
        BTC_FIRST[:-1],  # truncated
        BTC_FIRST[:10] + BTC_FIRST[10:].upper(),  # mixed case bech32
        # taproot with a bech32 checksum where bech32m belongs (BIP350)
        "bc1p0xlxvlhemja6c4dqv22uapctqupfhlxm9h8z3k2e72q4k9hcz7vqh2y7hd",
        "tb1qcr8te4kr609gcawutmrza0j4xv80jy8zmfp6l0",  # testnet segwit
        "mipcBbFg9gMiCh81Kj8tqqdgoZub1ZJRfn",  # testnet P2PKH
        "2MzQwSSnBHWHqSAqtTVQ6v47XtaisrJa1Vc",  # testnet P2SH
        "1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN3",  # P2PKH with a bad checksum
        LTC_FIRST,
        "ltc1qcr8te4kr609gcawutmrza0j4xv80jy8z4nqduv",  # BTC's key hash on the LTC network
        "LM2WMpR1Rp6j3Sa59cMXMs1SPzj9eXpGc1",
        ETH_FIRST,
    ],
    "LTC": [
        LTC_FIRST[:-1] + "c",
        LTC_FIRST[:-3],
        "tltc1qjmxnz78nmc8nq77wuxh25n2es7rzm5c25y4uaa",  # testnet
        "3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy",  # deprecated LTC P2SH form: it is Bitcoin's too
        "LM2WMpR1Rp6j3Sa59cMXMs1SPzj9eXpGc2",
        BTC_FIRST,
        "1BvBMSEYstWetqTFn5Au4m4GFg7xJaNVN2",
        ETH_FIRST,
    ],
    "ETH": [
        ETH_FIRST[:-1] + "5",  # one digit off: the EIP-55 case no longer matches
        ETH_FIRST.replace("Ef", "ef", 1),  # one letter in the wrong case
        ETH_FIRST[:-1],
        ETH_FIRST + "0",
        ETH_FIRST[2:],  # no prefix
        "0X" + ETH_FIRST[2:],
        "0x" + "g" * 40,
        "0x" + "٣" * 40,  # non-ASCII digits
        BTC_FIRST,
    ],
}

GARBAGE = [
    "",
    " ",
    "\n",
    " " + BTC_FIRST,
    BTC_FIRST + "\n",
    " " + ETH_FIRST,
    "₿c1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu",
    "\u217ctc1qjmxnz78nmc8nq77wuxh25n2es7rzm5c2rkk4wh",  # roman numeral l
    "0x" + "\u0660" * 40,
    "\x00" * 42,
    "💸" * 30,
    "1" * 10_000,
    "bc1" + "q" * 100_000,
    "0x",
    "bc1",
    "ltc1",
]


@pytest.fixture(scope="module")
def cryptos() -> dict[str, Crypto]:
    return load_settings().cryptos


@pytest.fixture(scope="module")
def book(cryptos: dict[str, Crypto]) -> Bip32AddressBook:
    return Bip32AddressBook(cryptos)


def test_the_address_book_satisfies_the_port(book: Bip32AddressBook) -> None:
    port: AddressBook = book
    assert port.cryptos_for(BTC_FIRST) == ["BTC"]


@pytest.mark.parametrize(
    ("crypto", "address", "path"),
    [
        ("BTC", BTC_FIRST, "m/84'/0'/0'/0/0"),
        ("LTC", LTC_FIRST, "m/84'/2'/0'/0/0"),
        ("ETH", ETH_FIRST, "m/44'/60'/0'/0/0"),
    ],
)
def test_the_first_deposit_address_is_the_known_vector_of_the_test_mnemonic(
    book: Bip32AddressBook, crypto: str, address: str, path: str
) -> None:
    derived = book.derive(crypto, 0)
    assert derived.address == address
    assert derived.path == path


@pytest.mark.parametrize("crypto", ["BTC", "ETH", "LTC"])
def test_the_next_deposit_addresses_differ_are_valid_and_record_their_paths(
    book: Bip32AddressBook, cryptos: dict[str, Crypto], crypto: str
) -> None:
    derived = [book.derive(crypto, index) for index in range(4)]
    assert len({d.address for d in derived}) == 4
    for index, d in enumerate(derived):
        assert book.is_valid(crypto, d.address)
        assert d.path == f"{cryptos[crypto].derivation_path}/0/{index}"


def test_deriving_the_same_index_twice_gives_the_same_address(book: Bip32AddressBook) -> None:
    assert book.derive("BTC", 7) == book.derive("BTC", 7)


def test_deriving_for_an_unknown_crypto_is_refused_with_a_readable_message(
    book: Bip32AddressBook,
) -> None:
    with pytest.raises(CryptoUnknown, match=r"'DOGE'.*BTC, ETH, LTC"):
        book.derive("DOGE", 0)


@pytest.mark.parametrize("index", [-1, HIGHEST_INDEX + 1])
def test_deriving_a_hardened_or_negative_index_is_refused(book: Bip32AddressBook, index: int) -> None:
    with pytest.raises(ValueError, match="index"):
        book.derive("BTC", index)


@pytest.mark.parametrize(
    ("crypto", "address"), [(crypto, a) for crypto, addresses in VALID.items() for a in addresses]
)
def test_well_formed_mainnet_addresses_are_valid(book: Bip32AddressBook, crypto: str, address: str) -> None:
    assert book.is_valid(crypto, address)


@pytest.mark.parametrize(
    ("crypto", "address"), [(crypto, a) for crypto, addresses in INVALID.items() for a in addresses]
)
def test_bad_checksums_wrong_networks_and_truncations_are_invalid(
    book: Bip32AddressBook, crypto: str, address: str
) -> None:
    assert not book.is_valid(crypto, address)


@pytest.mark.parametrize("address", GARBAGE)
def test_garbage_is_invalid_for_every_crypto_without_raising(book: Bip32AddressBook, address: str) -> None:
    assert book.cryptos_for(address) == []
    for crypto in ("BTC", "ETH", "LTC", "DOGE", ""):
        assert not book.is_valid(crypto, address)


def test_non_strings_are_invalid_without_raising(book: Bip32AddressBook) -> None:
    assert not book.is_valid("BTC", None)  # type: ignore[arg-type]
    assert not book.is_valid("ETH", b"0x9858EfFD232B4033E47d90003D41EC34EcaEda94")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("crypto", "address"), [(crypto, a) for crypto, addresses in VALID.items() for a in addresses]
)
def test_each_valid_address_belongs_to_exactly_its_own_crypto(
    book: Bip32AddressBook, crypto: str, address: str
) -> None:
    assert book.cryptos_for(address) == [crypto]


def test_only_configured_cryptos_are_detected(cryptos: dict[str, Crypto]) -> None:
    bitcoin_only = Bip32AddressBook({"BTC": cryptos["BTC"]})
    assert bitcoin_only.cryptos_for(BTC_FIRST) == ["BTC"]
    assert bitcoin_only.cryptos_for(LTC_FIRST) == []
    assert not bitcoin_only.is_valid("LTC", LTC_FIRST)


@given(crypto=st.sampled_from(["BTC", "ETH", "LTC"]), index=st.integers(0, HIGHEST_INDEX))
def test_every_derived_address_is_valid_for_its_crypto_and_no_other(
    book: Bip32AddressBook, crypto: str, index: int
) -> None:
    derived = book.derive(crypto, index)
    assert derived.path.endswith(f"/0/{index}")
    assert book.cryptos_for(derived.address) == [crypto]


def test_a_crypto_without_address_support_is_refused_naming_its_code(
    cryptos: dict[str, Crypto],
) -> None:
    with pytest.raises(ValueError, match=r"cryptos\.DOGE"):
        Bip32AddressBook({**cryptos, "DOGE": cryptos["BTC"]})


BIP32_MASTER_XPUB = (
    "xpub661MyMwAqRbcFtXgS5sYJABqqG9YLmC4Q1Rdap9gSE8NqtwybGhePY2gZ29ESFjqJoCu1Rupje8YtG"
    "qsefD265TMg7usUDFdp6W1EGMcet8"
)
BIP32_MASTER_XPRV = (
    "xprv9s21ZrQH143K3QTDL4LXw2F7HEK3wJUD2nW2nRk4stbPy6cq3jPPqjiChkVvvNKmPGJxWUtg6LnF5k"
    "ejMRNNU3TGtRBeJgk33yuGBxrMPHi"
)

BTC_CHANGE_LEVEL_ZPUB = (  # m/84'/0'/0'/0 of the test mnemonic: one level too deep
    "zpub6u4KbU8TSgNuZSxzv7HaGq5Tk361gMHdZxnM4UYuwzg5CMLcNytzhobitV4Zq6vWtWHpG9QijsigkxAzXvQWyLRfLq1L"
    "7VxPP1tky1hPfD4"
)
# an xpub where a zpub belongs
ETH_ACCOUNT_XPUB = load_settings().cryptos["ETH"].extended_public_key


KEY = "extended_public_key"
PATH = "derivation_path"


@pytest.mark.parametrize(
    ("code", "change", "message"),
    [
        ("BTC", {KEY: "zpub-not-a-key"}, r"cryptos\.BTC\.extended_public_key is not a BTC"),
        ("BTC", {KEY: ""}, r"cryptos\.BTC\.extended_public_key is not a BTC"),
        ("BTC", {KEY: ETH_ACCOUNT_XPUB}, r"cryptos\.BTC\.extended_public_key is not a BTC"),
        ("LTC", {KEY: "zpub6rFR7y4Q2AijBEq"}, r"cryptos\.LTC\.extended_public_key is not a LTC"),
        ("ETH", {KEY: BIP32_MASTER_XPRV}, r"cryptos\.ETH\.extended_public_key is a private key"),
        ("ETH", {KEY: BIP32_MASTER_XPUB}, r"cryptos\.ETH\.extended_public_key .* account-level"),
        ("BTC", {KEY: BTC_CHANGE_LEVEL_ZPUB}, r"cryptos\.BTC\.extended_public_key .* account"),
        ("BTC", {PATH: "84'/0'/0'"}, r"cryptos\.BTC\.derivation_path .* is not a path"),
        ("BTC", {PATH: "m/84'/0'/x'"}, r"cryptos\.BTC\.derivation_path .* is not a path"),
        ("BTC", {PATH: "m/84'/0'"}, r"cryptos\.BTC\.derivation_path .* does not match"),
        ("BTC", {PATH: "m/84'/0'/1'"}, r"cryptos\.BTC\.derivation_path .* does not match"),
    ],
)
def test_an_unusable_key_or_path_is_refused_naming_its_crypto(
    cryptos: dict[str, Crypto], code: str, change: dict[str, str], message: str
) -> None:
    broken = msgspec.structs.replace(cryptos[code], **change)
    with pytest.raises(ValueError, match=message):
        Bip32AddressBook({**cryptos, code: broken})
