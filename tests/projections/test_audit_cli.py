"""`broker-ledger audit verify | export`: their output and exit codes (0 passed, 1 failed, 2 usage)."""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from application.credentials import VAR_ENV
from application.store.database import DATABASE_URL_ENV
from interface.cli import audit as audit_cli
from projections.merkle import consistent, leaf_hash, root_from_inclusion
from tests.projections.audit_support import Flows, catch_up, new_ledger, own_database, query, stored_event
from tests.projections.support import run_cli as run

CONSOLE_SCRIPT = Path(sys.executable).parent / "broker-ledger"
# a period (from, to] holding every event, its bounds as every instant is written (RFC 3339 with an offset)
EVERYTHING = ("--from", "2000-01-01T00:00:00Z", "--to", "2100-01-01T00:00:00Z")


@pytest.fixture(scope="module")
def one_life(database_url: str) -> Iterator[str]:
    """One customer's life, every projection caught up; each test gets a copy."""
    with own_database(database_url) as url:
        ledger = new_ledger(url)
        try:
            Flows(ledger).lives(1)
        finally:
            ledger.close()
        catch_up(url)
        yield url


@pytest.fixture
def audited(
    database_url: str, one_life: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A copy of `one_life`, the CLI pointed at it."""
    with own_database(database_url, template=one_life) as url:
        monkeypatch.setenv(DATABASE_URL_ENV, url)
        monkeypatch.setenv(VAR_ENV, str(tmp_path / "var"))
        yield url


def test_verify_prints_every_check_and_exits_0_when_all_pass(audited, capsys):
    assert run("audit", "verify") == 0
    out = capsys.readouterr().out
    assert re.search(r"^OK +read model AuditChain$", out, re.MULTILINE)
    assert re.search(r"^OK +audit chain$", out, re.MULTILINE)
    assert re.search(r"^(OK|SKIPPED) +postings balance$", out, re.MULTILINE)
    assert out.rstrip().endswith("audit verify: all checks passed")


def test_verify_exits_1_and_names_a_tampered_event(audited):
    victim = stored_event(audited, "Transaction.Committed")
    query(
        audited,
        "UPDATE ledger.ledger_events SET state = convert_to(replace(convert_from(state, 'UTF8'), "
        "'\"timestamp\"', '\"timestamp\" '), 'UTF8') WHERE notification_id = %s",
        victim["notification_id"],
    )
    env = {**os.environ, DATABASE_URL_ENV: audited}
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "audit", "verify"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"^FAILED +audit chain$", done.stdout, re.MULTILINE)
    assert f"first mismatch: notification {victim['notification_id']} ({victim['topic']}" in done.stdout
    assert str(victim["originator_id"]) in done.stdout
    assert done.stdout.rstrip().endswith("check(s) FAILED")


def test_verify_checks_a_chain_hash_the_auditor_kept(audited, capsys):
    [head] = query(
        audited, "SELECT notification_id, chain_hash FROM read.audit_chain ORDER BY seq DESC LIMIT 1"
    )
    kept = f"{head['notification_id']}:{head['chain_hash']}"
    assert run("audit", "verify", "--expect", kept) == 0
    assert f"chain head: notification {kept.replace(':', ', chain hash ')}" in capsys.readouterr().out
    assert run("audit", "verify", "--expect", f"{head['notification_id']}:{'0' * 64}") == 1
    assert f"expected hash at notification {head['notification_id']} differs" in capsys.readouterr().out


@pytest.mark.parametrize("kept", ["12", "x:" + "0" * 64, "12:abc"])
def test_verify_refuses_a_malformed_kept_hash(audited, capsys, kept):
    assert run("audit", "verify", "--expect", kept) == 2
    assert "NOTIFICATION_ID:CHAIN_HASH" in capsys.readouterr().err


def test_export_writes_the_period_to_a_file(audited, tmp_path, capsys):
    out = tmp_path / "history.jsonl"
    assert run("audit", "export", *EVERYTHING, "--out", str(out)) == 0
    lines = [json.loads(line, parse_float=Decimal) for line in out.read_text().splitlines()]
    count = query(audited, "SELECT count(*) AS n FROM ledger.ledger_events")[0]["n"]
    assert len(lines) == count
    assert f"exported {count} events recorded in (2000-01-01 00:00:00+00:00" in capsys.readouterr().err
    assert all(line["chain_hash"] for line in lines)


def test_export_writes_to_standard_output_by_default(audited, capsys):
    assert run("audit", "export", "--from", "2000-01-01T00:00:00+00:00", "--to", "2000-01-02T00:00:00Z") == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "exported 0 events" in captured.err


def test_export_creates_the_missing_folders_of_its_path(audited, tmp_path):
    out = tmp_path / "audits" / "2026" / "history.jsonl"
    assert run("audit", "export", *EVERYTHING, "--out", str(out)) == 0
    count = query(audited, "SELECT count(*) AS n FROM ledger.ledger_events")[0]["n"]
    assert out.read_text().count("\n") == count


def test_export_under_a_file_says_a_file_is_in_the_way_and_exits_2(audited, tmp_path, capsys):
    in_the_way = tmp_path / "somefile"
    in_the_way.write_text("kept")

    out = f"{in_the_way}/sub"
    assert run("audit", "export", *EVERYTHING, "--out", out) == 2

    refusal = capsys.readouterr().err
    assert f"cannot create the folder {in_the_way}: a file is where a folder should be" in refusal
    assert "Traceback" not in refusal
    assert in_the_way.read_text() == "kept"


def test_export_to_a_full_device_says_so_and_exits_2(audited, capsys):
    assert run("audit", "export", *EVERYTHING, "--out", "/dev/full") == 2
    assert "cannot write /dev/full: No space left on device" in capsys.readouterr().err


def test_an_export_that_fails_midway_leaves_no_file(audited, tmp_path, monkeypatch, capsys):
    def disk_full_after_a_line(url, start, end, stream, **_):
        stream.write("{}\n")
        stream.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(audit_cli, "export", disk_full_after_a_line)
    out = tmp_path / "history.jsonl"

    assert run("audit", "export", *EVERYTHING, "--out", str(out)) == 2

    assert "No space left on device; nothing was kept" in capsys.readouterr().err
    assert not out.exists()


def test_export_to_a_full_standard_output_says_so_without_a_traceback(audited):
    env = {**os.environ, DATABASE_URL_ENV: audited}
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [str(CONSOLE_SCRIPT), "audit", "export", *EVERYTHING],
            env=env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "audit export: cannot write to standard output: No space left on device"


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("yesterday", "2100-01-01T00:00:00Z"),
        ("2026-03-01", "2026-03-02T00:00:00Z"),  # a day: not an instant of the API's form
        ("2026-W09-7T00:00:00Z", "2026-03-02T00:00:00Z"),
        ("0001-01-01T00:00:00+01:00", "2026-03-02T00:00:00Z"),  # before the year 1 in UTC
    ],
)
def test_export_refuses_a_malformed_period(audited, capsys, start, end):
    assert run("audit", "export", "--from", start, "--to", end) == 2
    assert "--from" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("start", "end"), [("2026-03-02T00:00:00Z", "2026-03-01T00:00:00Z"), (EVERYTHING[3], EVERYTHING[3])]
)
def test_export_takes_a_to_not_after_from_as_the_empty_period_at_to_as_reconcile_does(
    audited, capsys, start, end
):
    assert run("audit", "export", "--from", start, "--to", end) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "exported 0 events" in captured.err


def test_export_with_a_partner_holds_that_partners_events_only(populated, capsys):
    """`populated`: the scenario's customers and trades of `demo` and `other`."""
    lines = {}
    for partner in ("demo", "other", None):
        chosen = ("--partner", partner) if partner else ()
        assert run("audit", "export", *EVERYTHING, *chosen) == 0
        lines[partner] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    demo, other = ({line["notification_id"] for line in lines[p]} for p in ("demo", "other"))
    assert demo and other and not demo & other
    assert all('"other"' not in line["state"] for line in lines["demo"])
    assert all('"demo"' not in line["state"] for line in lines["other"])
    rest = [line for line in lines[None] if line["notification_id"] not in demo | other]
    assert len(rest) < len(lines[None]) / 10  # the whole ledger's: the deposit addresses' pools
    assert all('"demo"' not in line["state"] and '"other"' not in line["state"] for line in rest)
    assert run("audit", "export", *EVERYTHING, "--partner", "nobody") == 2
    assert "nobody" in capsys.readouterr().err


def test_verify_signs_a_checkpoint_and_prove_prints_proofs_that_verify(audited, capsys):
    assert run("audit", "verify") == 0
    out = capsys.readouterr().out
    assert re.search(r"^OK +merkle tree$", out, re.MULTILINE)
    signed = re.search(
        r"^checkpoint signed: tree size (\d+), root ([0-9a-f]{64}), key ([0-9a-f]{64})$", out, re.M
    )
    assert signed is not None
    size, root = int(signed.group(1)), signed.group(2)
    position = query(audited, "SELECT notification_id FROM ledger.ledger_events ORDER BY 1")[2][
        "notification_id"
    ]
    assert run("audit", "prove", "inclusion", "--position", str(position)) == 0
    proof = json.loads(capsys.readouterr().out)
    assert proof["treeSize"] == size and proof["event"]["position"] == position
    leaf = leaf_hash(
        f"{position}\n{proof['event']['originatorId']}\n{proof['event']['originatorVersion']}\n"
        f"{proof['event']['topic']}\n".encode()
        + base64.b64decode(proof["event"]["state"])
    )
    assert root_from_inclusion(proof["leafIndex"], size, leaf, proof["auditPath"]) == root
    assert run("audit", "prove", "consistency", "--from", "3") == 0
    consistency = json.loads(capsys.readouterr().out)
    assert consistency["toRoot"] == root
    assert consistent(3, size, consistency["fromRoot"], root, consistency["proof"])
    assert run("audit", "prove", "consistency", "--from", str(size + 1)) == 2
    assert run("audit", "prove", "inclusion", "--position", "999999999") == 2
