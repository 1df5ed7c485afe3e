"""Fault-test fixtures: a PostgreSQL cluster the tests own, one real server on one database of it for the
whole folder (brought back up before each test if a test left it down), tokens per role, the number of fault
rounds (more with --run-slow); each test's figures go through the root conftest's `report`.

The cluster is private (see `cluster.PrivateCluster`) because the tests stop it hard; the shared server of
TEST_DATABASE_URL is never touched. When the cluster cannot be made the tests fail, never skip: a fault test
that silently does not run proves nothing.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.e2e.support import Api, api_client
from tests.processes import ApiServer
from tests.resilience.cluster import ClusterUnavailable, PrivateCluster

HEALTHY_WITHIN_SECONDS = 30


@pytest.fixture
def rounds(request: pytest.FixtureRequest) -> int:
    """Database outages per run: 1 by default (CI: every check runs on one outage), 6 with --run-slow."""
    return 6 if request.config.getoption("--run-slow") else 1


@pytest.fixture
def crash_rounds(request: pytest.FixtureRequest) -> int:
    """Kills of the API per run: 1 by default (a restart costs seconds, the suite's budget is tight), 4 with
    --run-slow."""
    return 4 if request.config.getoption("--run-slow") else 1


@pytest.fixture
def load_seconds(request: pytest.FixtureRequest) -> float:
    """How long the conservation test trades: 4 s by default, 40 s with --run-slow."""
    return 40.0 if request.config.getoption("--run-slow") else 4.0


@pytest.fixture(scope="session")
def private_cluster() -> Iterator[PrivateCluster]:
    cluster, problem = _start_private_cluster()
    if cluster is None:
        pytest.fail(
            f"cannot start the private PostgreSQL cluster the fault tests need: {problem}", pytrace=False
        )
    try:
        yield cluster
    finally:
        cluster.destroy()


def _start_private_cluster() -> tuple[PrivateCluster | None, str]:
    try:
        cluster = PrivateCluster()
    except (ClusterUnavailable, OSError) as error:
        return None, str(error)
    try:
        cluster.init()
        cluster.start()
    except (ClusterUnavailable, OSError, subprocess.SubprocessError) as error:
        cluster.destroy()
        return None, f"{error} (binaries {cluster.bin_dir}, run as {cluster.user or 'this user'})"
    return cluster, ""


@dataclass
class Service:
    """The running server, its database, and a token per client."""

    server: ApiServer
    database_url: str
    tokens: dict[str, str]
    started_in: float

    def client(self, client_id: str = "demo-broker") -> Api:
        return api_client(self.server.base_url, self.tokens[client_id])


@pytest.fixture(scope="session")
def shared_service(
    private_cluster: PrivateCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    """One server (`--workers 2`) on one database of the private cluster for the whole folder: a start costs
    seconds, so the tests share it, each with customers of its own. It must still stop cleanly at the end."""
    database_url = private_cluster.create_database(f"resilience_{uuid.uuid4().hex[:12]}")
    root = tmp_path_factory.mktemp("resilience-server")
    server = ApiServer(database_url, root / "var", root / "server.log", workers=2)
    try:
        started_in = server.start()
        tokens = {client: server.token(client) for client in ("demo-broker", "demo-operator")}
        yield Service(server, database_url, tokens, started_in)
    finally:
        code = server.stop()
    assert code == 0, f"the server did not exit with 0 on SIGTERM ({code})\n{server.tail()}"


@pytest.fixture
def service(shared_service: Service, private_cluster: PrivateCluster) -> Service:
    """The shared service with its database up and its server answering, whatever a test before left."""
    if not private_cluster.running():
        private_cluster.start()
    if not shared_service.server.alive():
        shared_service.server.start()
    shared_service.server.wait_until_healthy(HEALTHY_WITHIN_SECONDS)
    return shared_service
