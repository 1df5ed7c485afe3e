"""The deposit address pool, whose history grows with every sell, loads from a snapshot."""

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
    loaded = ledger.repository.get(pool.id)
    assert (loaded.version, loaded.next_index) == (251, 250)
