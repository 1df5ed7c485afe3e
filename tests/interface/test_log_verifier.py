"""The standalone verifier of docs/verifying-the-log.md, exactly as the page prints it, against a served
ledger on a database of its own: it verifies a random event of the auditor's partner, two checkpoints and an
export's manifest; a changed event, proof or signature makes it fail. And the audit endpoints' refusals."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from application.store.database import CONNECTIONS_ENV, MIN_CONNECTIONS
from interface.environment import CHECKPOINT_EVENTS_ENV, CHECKPOINT_SECONDS_ENV
from tests.databases import scratch_database
from tests.e2e.support import client_secrets, obtain_token, token_headers
from tests.processes import running_server

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "verifying-the-log.md"


def verifier_source() -> str:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)[-1]


@dataclass
class Service:
    base_url: str
    database_url: str
    var: Path
    folder: Path

    def token(self, client_id: str) -> str:
        return obtain_token(self.base_url, client_id, client_secrets(self.var)[client_id])

    def sql(self, statement: str, *params: object) -> list[tuple]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            cursor = conn.execute(statement, params or None)
            return cursor.fetchall() if cursor.description else []

    def get(self, path: str, client_id: str = "demo-auditor") -> httpx.Response:
        return httpx.get(self.base_url + path, headers=token_headers(self.token(client_id)), timeout=30)


@pytest.fixture(scope="module")
def service(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A served ledger with two customers of `demo` and one of `other`, two checkpoints or more, and an
    export of `demo` in its own folder (signed with the service's key)."""
    folder = tmp_path_factory.mktemp("verifier")
    env = {CHECKPOINT_EVENTS_ENV: "1", CHECKPOINT_SECONDS_ENV: "1", CONNECTIONS_ENV: str(MIN_CONNECTIONS)}
    with (
        scratch_database(database_url, "log_verifier") as url,
        running_server(url, folder / "var", folder / "server.log", workers=1, env=env) as server,
    ):
        served = Service(server.base_url, url, folder / "var", folder)
        for client_id in ("demo-broker", "demo-broker", "other-broker"):
            customer = {
                "customerCode": f"v-{uuid.uuid4().hex[:8]}",
                "trustLevel": "Basic",
                "status": "ACTIVE",
            }
            headers = token_headers(served.token(client_id))
            assert (
                httpx.post(f"{server.base_url}/customer", json=customer, headers=headers).status_code == 201
            )
            time.sleep(1.2)  # a checkpoint a second while the tree grows
        wait_for_checkpoints(served, 2)
        export(served)
        yield served


def wait_for_checkpoints(service: Service, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = service.get("/audit/checkpoints")
        if answer.status_code == 200 and len({c["treeSize"] for c in answer.json()["checkpoints"]}) >= count:
            return
        time.sleep(0.3)
    raise AssertionError(f"fewer than {count} checkpoints: {answer.text}")


def export(service: Service) -> None:
    env = {**os.environ, "DATABASE_URL": service.database_url, "BROKER_LEDGER_VAR": str(service.var)}
    command = [str(Path(sys.executable).parent / "broker-ledger"), "export", "--partner", "demo"]
    period = ["--from", "2000-01-01T00:00:00Z", "--to", "2100-01-01T00:00:00Z", "--out", str(service.folder)]
    done = subprocess.run([*command, *period, "--format", "csv"], env=env, cwd=ROOT, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


def demo_position(service: Service) -> int:
    """A random position of an event of `demo`'s customers."""
    rows = service.sql(
        "SELECT notification_id, state FROM ledger.ledger_events WHERE topic LIKE 'domain.customer:%%' "
        "ORDER BY notification_id"
    )
    return random.choice([n for n, state in rows if b'"demo"' in bytes(state)] or [rows[0][0]])


def verify(service: Service, position: int, *folders: Path) -> subprocess.CompletedProcess[str]:
    script = service.folder / "verify_log.py"
    script.write_text(verifier_source())
    argv = [sys.executable, str(script), service.base_url, service.token("demo-auditor"), str(position)]
    return subprocess.run([*argv, *map(str, folders)], capture_output=True, text=True, timeout=60)


def test_the_verifier_is_at_most_40_lines_of_hashlib_and_one_ed25519_library():
    source = verifier_source()
    assert len(source.splitlines()) <= 40
    imports = {m for line in re.findall(r"^(?:from|import) (.+)$", source, re.MULTILINE) for m in [line]}
    assert imports == {
        "base64, hashlib, json, pathlib, sys, urllib.request",
        "cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey",
    }


def test_the_verifier_verifies_an_event_two_checkpoints_and_a_manifest(service):
    done = verify(service, demo_position(service), service.folder)
    assert done.returncode == 0 and done.stdout.strip() == "verified", done.stdout + done.stderr


def test_a_changed_manifest_fails_its_signature(service, tmp_path):
    copy = tmp_path / "export"
    copy.mkdir()
    manifest = json.loads((service.folder / "manifest.json").read_text())
    manifest["files"][0]["rows"] += 1
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (copy / "manifest.sig").write_text((service.folder / "manifest.sig").read_text())
    done = verify(service, demo_position(service), copy)
    assert done.returncode != 0 and "InvalidSignature" in done.stderr


def test_a_changed_event_a_changed_proof_or_signature_fails(service):
    position = demo_position(service)
    assert verify(service, position).returncode == 0
    tampering = [
        (
            "UPDATE ledger.ledger_events SET state = state || '\\x20'::bytea WHERE notification_id = %s",
            "UPDATE ledger.ledger_events SET state = substring(state from 1 for length(state) - 1) "
            "WHERE notification_id = %s",
            "inclusion",
        ),
        (  # every stored subtree but the event's own leaf: the proofs served are wrong
            "UPDATE read.merkle_nodes SET hash = reverse(hash) WHERE notification_id IS DISTINCT FROM %s",
            "UPDATE read.merkle_nodes SET hash = reverse(hash) WHERE notification_id IS DISTINCT FROM %s",
            "",
        ),
        (
            "UPDATE read.audit_tree_checkpoints SET root = reverse(root) WHERE %s > 0",
            "UPDATE read.audit_tree_checkpoints SET root = reverse(root) WHERE %s > 0",
            "",
        ),
    ]
    for change, undo, said in tampering:
        service.sql(change, position)
        try:
            done = verify(service, position)
            assert done.returncode != 0, change
            assert said in done.stderr, done.stderr
        finally:
            service.sql(undo, position)
        assert verify(service, position).returncode == 0, undo


def test_another_partners_event_is_not_shown_and_sizes_beyond_the_tree_are_refused(service):
    rows = service.sql("SELECT notification_id, state FROM ledger.ledger_events ORDER BY notification_id")
    others = [n for n, state in rows if b'"other"' in bytes(state)]
    size = service.get("/audit/checkpoints?limit=1").json()["checkpoints"][0]["treeSize"]
    refused = service.get(f"/audit/proof/inclusion?position={others[0]}&treeSize={size}")
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    beyond = service.get(f"/audit/proof/consistency?from=1&to={size + 1000}")
    assert beyond.status_code == 404 and beyond.json()["code"] == "beyond_tree"
    backwards = service.get(f"/audit/proof/consistency?from={size}&to=1")
    assert backwards.status_code == 404 and backwards.json()["code"] == "not_found"
    assert service.get("/audit/public-key", "demo-broker").status_code == 403
    keys = service.get("/audit/public-key").json()
    assert keys["algorithm"] == "Ed25519" and keys["publicKeyPem"].startswith("-----BEGIN PUBLIC KEY-----")
