"""An aggregate whose history only grows loads from its latest snapshot plus the events since: the deposit
address pool (every sell). Limit windows load from their latest event alone (test_limit_window_loading.py)."""

from __future__ import annotations

from domain.deposits import AddressPool


def test_the_address_pool_is_snapshotted_every_hundred_versions_and_loads_from_the_latest(make_ledger):
    ledger = make_ledger()
    pool = AddressPool("BTC")
    for n in range(250):
        pool.allocate(f"sell:demo:TX{n}")
        ledger.save(pool)
    snapshots = list(ledger.snapshots.get(pool.id, desc=True))
    assert [s.originator_version for s in snapshots] == [200, 100]
    loaded = ledger.store.address_pool("BTC")
    assert (loaded.version, loaded.next_index) == (251, 250)
