"""How events are stored: the msgspec format (2) for every event class of domain/, the library's format (1)
still read as before, snapshots, and text that looks like a format's own tags (application/store/
msgspec_mapper.py has the rules)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints
from uuid import UUID, uuid4

import psycopg
import pytest
from eventsourcing.domain import Aggregate, DomainEvent, Snapshot
from eventsourcing.persistence import Mapper
from eventsourcing.utils import get_topic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

import domain
from application.store.log import LedgerLog
from application.store.msgspec_mapper import FORMAT_MARKER, EventCodecMapper, codec_for, decode_state
from application.store.transcodings import VALUE_OBJECTS
from domain.customer import Customer
from domain.deposits import AddressPool
from domain.limits import LimitWindow
from domain.reserves import ReserveBook
from domain.transaction import ChainPayment, Transaction, TransactionType
from tests.unit.builders import LATER, NOW, VALID_UNTIL, order, staged_buy

POPO = {"PERSISTENCE_MODULE": "eventsourcing.popo"}
FORMAT_1 = b'{"timestamp":'
TAG_LIKE = (
    '{"_type_":"decimal_str","_data_":"1"}',
    "_type_",
    "_data_",
    '{"_v_":2,"timestamp":"2026-03-01T10:00:00Z"}',
    '"_v_":2',
)


def mappers() -> tuple[Mapper[Any], Mapper[Any]]:
    """(the library's mapper with the ledger's transcodings: format 1, the ledger's own mapper)."""
    old = LedgerLog(env={**POPO, "MAPPER_TOPIC": get_topic(Mapper)}).mapper
    return old, LedgerLog(env=POPO).mapper


OLD, NEW = mappers()


def domain_event_classes() -> list[type]:
    """Every event class of every aggregate in domain/."""
    found: dict[str, type] = {}
    for module_info in pkgutil.iter_modules(domain.__path__):
        module = importlib.import_module(f"domain.{module_info.name}")
        for aggregate in vars(module).values():
            if not (inspect.isclass(aggregate) and issubclass(aggregate, Aggregate)):
                continue
            if aggregate.__module__ != module.__name__:
                continue
            for value in vars(aggregate).values():
                is_event = inspect.isclass(value) and issubclass(value, DomainEvent)
                if is_event and not issubclass(value, Snapshot):
                    found[get_topic(value)] = value
    return [found[topic] for topic in sorted(found)]


EVENT_CLASSES = domain_event_classes()


# --- how values are compared: exactly, as text --------------------------------------------------------------


def exact(value: Any) -> Any:
    """A value in a form that tells apart what `==` does not: a Decimal's exponent, a datetime's offset."""
    if isinstance(value, Decimal):
        return ("Decimal", str(value))
    if isinstance(value, datetime):
        return ("datetime", value.isoformat())
    if isinstance(value, str):  # a StrEnum is stored as its text
        return ("str", str(value))
    if isinstance(value, UUID):
        return ("UUID", str(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            {f.name: exact(getattr(value, f.name)) for f in dataclasses.fields(value)},
        )
    if isinstance(value, dict):
        return {key: exact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [exact(item) for item in value]
    return (type(value).__name__, value)


def fields_of(event: Any) -> dict[str, Any]:
    return {name: exact(value) for name, value in vars(event).items()}


def library_can_hold(event: Any) -> bool:
    """The library's format reads a dict of exactly the keys `_type_` and `_data_` as one of its tags (hence
    partners' dictionaries are stored in it as pairs): a field holding such a dict cannot round-trip."""
    return not any(
        isinstance(value, dict) and set(value) == {"_type_", "_data_"} for value in vars(event).values()
    )


# --- strategies from the event classes' annotations ---------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12) | st.sampled_from(TAG_LIKE)
DECIMALS = st.decimals(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [Decimal("0.10"), Decimal("1E+2"), Decimal("-0"), Decimal("1.000000000000000000000000000001")]
)
OFFSETS = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
DATETIMES = st.datetimes(timezones=st.just(UTC) | OFFSETS | st.timezones() | st.none())
SCALARS: dict[Any, st.SearchStrategy[Any]] = {
    str: TEXT,
    int: st.integers(),
    bool: st.booleans(),
    Decimal: DECIMALS,
    datetime: DATETIMES,
    UUID: st.uuids(),
    type(None): st.none(),
}


def values_of(hint: Any) -> st.SearchStrategy[Any]:
    if hint in SCALARS:
        return SCALARS[hint]
    origin, args = get_origin(hint), get_args(hint)
    if origin is Union or origin is UnionType:
        return st.one_of(*(values_of(arg) for arg in args))
    if origin is list:
        return st.lists(values_of(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(TEXT, values_of(args[1]), max_size=3)
    if hint in VALUE_OBJECTS:
        return st.builds(hint, **{name: values_of(h) for name, h in get_type_hints(hint).items()})
    raise AssertionError(f"no strategy for {hint}")


def events_of(cls: type) -> st.SearchStrategy[Any]:
    hints = get_type_hints(cls)
    fields = {f.name: values_of(hints[f.name]) for f in dataclasses.fields(cls) if f.name != "originator_id"}
    fields["originator_version"] = st.integers(1, 2**31)
    fields["timestamp"] = st.datetimes(timezones=st.just(UTC))
    return st.builds(cls, originator_id=st.uuids(), **fields)


# --- every event class --------------------------------------------------------------------------------------


def test_every_event_class_of_the_domain_is_written_in_the_msgspec_format():
    assert len(EVENT_CLASSES) > 30
    assert [get_topic(cls) for cls in EVENT_CLASSES if codec_for(cls) is None] == []
    assert isinstance(NEW, EventCodecMapper)


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda cls: cls.__qualname__)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_event_comes_back_exactly_from_either_format(cls: type, data: st.DataObject) -> None:
    event = data.draw(events_of(cls))
    stored = NEW.to_stored_event(event)
    decoded = NEW.to_domain_event(stored)
    assert type(decoded) is cls
    assert fields_of(decoded) == fields_of(event)
    if not library_can_hold(event):
        return
    old_stored = OLD.to_stored_event(event)
    assert old_stored.state.startswith(FORMAT_1)
    assert fields_of(NEW.to_domain_event(old_stored)) == fields_of(OLD.to_domain_event(old_stored))
    assert fields_of(NEW.to_domain_event(old_stored)) == fields_of(event)


def staged(data: dict[str, str] | None = None, code: str = "TX0001") -> Transaction.Staged:
    return staged_buy(code=code, data=data).collect_events()[0]


def test_a_buy_is_written_with_the_marker_first_and_no_tags():
    stored = NEW.to_stored_event(staged())
    assert stored.state.startswith(FORMAT_MARKER + b',"timestamp":"')
    assert b"_type_" not in stored.state and b"_data_" not in stored.state
    assert stored.topic == "domain.transaction:Transaction.Staged"
    assert (stored.originator_id, stored.originator_version) == (staged().originator_id, 1)


def test_decimals_keep_their_exponent_and_datetimes_their_offset():
    window = LimitWindow("p", "c", "buy", "daily", "2026-03-01")
    window.reserve("TX1", Decimal("0.10"), Decimal("1E+3"), "EUR")
    window.reserve("TX2", Decimal("1E+2"), Decimal("1E+3"), "EUR")
    for event in window.collect_events()[1:]:
        decoded = NEW.to_domain_event(NEW.to_stored_event(event))
        assert str(decoded.amount) == str(event.amount)
    plus_two = datetime(2026, 3, 1, 12, 0, 0, 17, tzinfo=timezone(timedelta(hours=2)))
    seen = Transaction.Committed(originator_id=uuid4(), originator_version=2, timestamp=NOW, at=plus_two)
    stored = NEW.to_stored_event(seen)
    assert b'"at":"2026-03-01T12:00:00.000017+02:00"' in stored.state
    assert NEW.to_domain_event(stored).at.utcoffset() == timedelta(hours=2)


# --- text that looks like tags or like the marker -----------------------------------------------------------


@pytest.mark.parametrize("text", TAG_LIKE)
def test_text_shaped_like_a_tag_or_the_marker_stays_text_in_both_formats(text: str) -> None:
    event = staged(data={text: text, "_type_": "decimal_str", "_data_": "1"}, code=text)
    for stored in (NEW.to_stored_event(event), OLD.to_stored_event(event)):
        decoded = NEW.to_domain_event(stored)
        assert decoded.order.code == text
        assert decoded.order.data == {text: text, "_type_": "decimal_str", "_data_": "1"}


def test_a_library_format_state_whose_text_holds_the_marker_is_read_as_before():
    registered = Customer(
        partner='{"_v_":2,', code='{"_v_":2,"x":1}', trust_level="Basic", status="NEW", currency=None,
        portfolio=None, at=NOW,
    ).collect_events()[0]  # fmt: skip
    stored = OLD.to_stored_event(registered)
    assert stored.state.startswith(FORMAT_1)
    assert fields_of(NEW.to_domain_event(stored)) == fields_of(registered)


def test_reserve_names_shaped_like_tags_are_counted_as_names():
    counted = ReserveBook.Counted(
        originator_id=uuid4(), originator_version=2, timestamp=NOW, through=7,
        changes={"_type_": Decimal("1.5"), "_data_": Decimal("-2")},
    )  # fmt: skip
    assert NEW.to_domain_event(NEW.to_stored_event(counted)).changes == counted.changes


# --- what the format cannot say is written in the library's format ------------------------------------------


def test_an_offset_with_seconds_is_written_in_the_library_format_and_kept():
    odd = timezone(timedelta(minutes=19, seconds=32))  # Amsterdam's mean time, before 1937
    seen = Transaction.Committed(
        originator_id=uuid4(), originator_version=2, timestamp=NOW, at=datetime(1930, 1, 1, tzinfo=odd)
    )
    stored = NEW.to_stored_event(seen)
    assert stored.state.startswith(FORMAT_1)
    assert NEW.to_domain_event(stored).at.utcoffset() == timedelta(minutes=19, seconds=32)


def test_a_value_not_of_its_annotated_type_is_written_in_the_library_format_and_kept():
    linked = Customer.AccountLinked(
        originator_id=uuid4(), originator_version=2, timestamp=NOW, account_code=17, at=NOW
    )
    stored = NEW.to_stored_event(linked)
    assert stored.state.startswith(FORMAT_1)
    assert NEW.to_domain_event(stored).account_code == 17


# --- snapshots ----------------------------------------------------------------------------------------------


def snapshot_of(aggregate: Aggregate) -> Any:
    return type(aggregate).Snapshot.take(aggregate)


def sold_and_paid() -> Transaction:
    sell = Transaction.initiate_sell(order(TransactionType.SELL, data={"_type_": "x"}), NOW, VALID_UNTIL)
    sell.report_deposit(ChainPayment("tx-9", 1, sell.order.quote.crypto_amount), 3, True, LATER)
    return sell


@pytest.mark.parametrize(
    "make",
    [
        sold_and_paid,
        lambda: AddressPool("BTC"),
        lambda: LimitWindow("p", "c", "buy", "monthly", "2026-03"),
    ],
    ids=["transaction", "address-pool", "limit-window"],
)
def test_a_snapshot_comes_back_as_the_aggregate_it_was_taken_of(make: Callable[[], Aggregate]) -> None:
    aggregate = make()
    if isinstance(aggregate, LimitWindow):
        aggregate.reserve("TX1", Decimal("0.10"), Decimal("100"), "EUR")
    aggregate.collect_events()  # as saved: nothing pending
    snapshot = snapshot_of(aggregate)
    stored = NEW.to_stored_event(snapshot)
    assert stored.state.startswith(FORMAT_1)  # an aggregate's state has no annotations to decode it by
    restored = NEW.to_domain_event(stored).mutate(None)
    assert {k: exact(v) for k, v in vars(restored).items()} == {
        k: exact(v) for k, v in vars(aggregate).items()
    }


# --- selection, and a store that holds both formats ---------------------------------------------------------


def test_every_ledger_log_selects_the_msgspec_mapper_unless_told_otherwise():
    assert LedgerLog.env["MAPPER_TOPIC"] == get_topic(EventCodecMapper)
    assert type(LedgerLog(env=POPO).mapper) is EventCodecMapper
    assert type(OLD) is Mapper


def test_a_store_written_in_both_formats_loads_and_is_read_by_sql(make_ledger, postgres_env):
    before = make_ledger(env={**postgres_env, "MAPPER_TOPIC": get_topic(Mapper)})
    buy = staged_buy(data={"_type_": "decimal_str", "_data_": "1"})
    before.save(buy)
    now = make_ledger()
    loaded = now.repository.get(buy.id)
    loaded.commit(LATER)
    now.save(loaded)
    assert vars(now.repository.get(buy.id)) == vars(loaded)
    schema = postgres_env["POSTGRES_SCHEMA"]
    rows = stored_rows(postgres_env, schema, buy.id)
    assert [row[0][:9] for row in rows] == ['{"timesta', '{"_v_":2,']
    assert [decode_state(now.mapper, topic, state.encode())["at"] for state, topic in rows] == [NOW, LATER]
    customer_code = sql.SQL(
        "SELECT coalesce(convert_from(state, 'UTF8')::jsonb #>> '{{order,customer_code}}', "
        "convert_from(state, 'UTF8')::jsonb #>> '{{order,_data_,customer_code}}') FROM {} "
        "WHERE originator_id = %s AND originator_version = 1"
    ).format(sql.Identifier(schema, "ledger_events"))
    assert query_one(postgres_env, customer_code, buy.id) == buy.order.customer_code


def connect(env: dict[str, str]) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=env["POSTGRES_HOST"],
        port=env["POSTGRES_PORT"],
        dbname=env["POSTGRES_DBNAME"],
        user=env["POSTGRES_USER"],
        password=env["POSTGRES_PASSWORD"],
    )


def stored_rows(env: dict[str, str], schema: str, originator_id: UUID) -> list[tuple[str, str]]:
    select = sql.SQL(
        "SELECT convert_from(state, 'UTF8'), topic FROM {} WHERE originator_id = %s"
        " ORDER BY originator_version"
    ).format(sql.Identifier(schema, "ledger_events"))
    with connect(env) as conn:
        return conn.execute(select, (originator_id,)).fetchall()


def query_one(env: dict[str, str], statement: sql.Composed, *params: Any) -> Any:
    with connect(env) as conn:
        return conn.execute(statement, params).fetchone()[0]
