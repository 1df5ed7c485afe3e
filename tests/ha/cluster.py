"""A PostgreSQL primary and two synchronous standbys under Patroni, with a one-member etcd as its store,
all on loopback, for the failover tests and for `scripts/ha-cluster`.

Only the standard library is used, so that the script can run it with any Python 3.11. Everything lives under
one folder (a temp dir by default): `state.json` (ports and process ids), etcd's data, and per node its
Patroni configuration, its data directory and one log (Patroni's and PostgreSQL's). Ports are free loopback
ports chosen at creation, never 5432: the machine's own PostgreSQL is not touched.

Run as root, the processes run as the `postgres` user (PostgreSQL refuses root) and the folder is handed to
it. Every process is started in a session of its own and recorded; `stop` ends them all, and then any process
still running out of the folder (the postgres processes Patroni started), so that nothing is left running.

Usage: python3 -m tests.ha.cluster start [FOLDER] | stop FOLDER | status FOLDER | url FOLDER
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PATRONI = "/usr/bin/patroni"
PATRONICTL = "/usr/bin/patronictl"
ETCD = "/usr/bin/etcd"
SCOPE = "broker-ledger-ha"
NODE_NAMES = ("node1", "node2", "node3")
APT_INSTALL = "apt-get install -y --no-install-recommends patroni etcd-server"

# The manager's timeouts, tuned for tests (Patroni's defaults are ttl 30, loop_wait 10, retry_timeout 10):
# Patroni wants loop_wait + 2 * retry_timeout <= ttl. A crashed primary is failed over at once
# (primary_start_timeout 0); a hung one when its leader key expires (ttl).
TEST_TIMEOUTS = {"ttl": 10, "loop_wait": 1, "retry_timeout": 4, "primary_start_timeout": 0}


class ClusterProblem(RuntimeError):
    """The topology could not be started or did not become healthy in time (the message says what)."""


def missing_packages() -> list[str]:
    """The Debian packages this topology needs that are not installed."""
    wanted = {"patroni": PATRONI, "etcd-server": ETCD, "postgresql-15": str(PG_BIN / "postgres")}
    return [package for package, path in wanted.items() if not os.access(path, os.X_OK)]


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (never 5432)."""
    sockets, ports = [], []
    try:
        while len(ports) < count:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
            port = sock.getsockname()[1]
            if port != 5432:
                ports.append(port)
    finally:
        for sock in sockets:
            sock.close()
    return ports


@dataclass
class Node:
    name: str
    pg_port: int
    api_port: int
    folder: str

    @property
    def data_dir(self) -> Path:
        return Path(self.folder) / "data"

    @property
    def config_file(self) -> Path:
        return Path(self.folder) / "patroni.yml"

    @property
    def log_file(self) -> Path:
        return Path(self.folder) / "patroni.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/{database}"

    def api(self, path: str, timeout: float = 2.0) -> dict[str, Any] | None:
        """GET of Patroni's REST API of this node; None when it does not answer (or answers an error code
        without a JSON body). Patroni answers 503 with its status for a node that is not what is asked."""
        request = f"http://127.0.0.1:{self.api_port}/{path}"
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            with contextlib.suppress(ValueError):
                return json.loads(error.read() or b"{}")
            return None
        except (OSError, ValueError):
            return None

    def postmaster_pid(self) -> int | None:
        """The pid of this node's postmaster, from postmaster.pid, if that process is alive."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def postgres_pids(self) -> list[int]:
        """This node's postmaster and its children (all of its PostgreSQL processes)."""
        postmaster = self.postmaster_pid()
        if postmaster is None:
            return []
        return [postmaster, *_children(postmaster)]


@dataclass
class Cluster:
    folder: str
    etcd_client_port: int
    etcd_peer_port: int
    nodes: list[Node]
    pids: dict[str, int] = field(default_factory=dict)
    timeouts: dict[str, int] = field(default_factory=lambda: dict(TEST_TIMEOUTS))

    # ---- creation and state -------------------------------------------------------------------------------

    @classmethod
    def create(cls, folder: str | Path | None = None, timeouts: dict[str, int] | None = None) -> Cluster:
        """A new topology's folder, ports and configuration files (nothing started)."""
        base = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="ha-cluster-"))
        base.mkdir(parents=True, exist_ok=True)
        if (base / "state.json").exists():
            raise ClusterProblem(f"{base} already holds a topology (state.json): stop it or choose another")
        ports = free_ports(2 + 2 * len(NODE_NAMES))
        nodes = [
            Node(name, ports[2 + 2 * i], ports[3 + 2 * i], str(base / name))
            for i, name in enumerate(NODE_NAMES)
        ]
        cluster = cls(
            str(base.resolve()), ports[0], ports[1], nodes, timeouts=dict(timeouts or TEST_TIMEOUTS)
        )
        for node in cluster.nodes:
            Path(node.folder).mkdir(exist_ok=True)
            node.config_file.write_text(cluster._patroni_config(node))
        (base / "sockets").mkdir(exist_ok=True)
        cluster.save()
        _hand_to_postgres(base)
        return cluster

    @classmethod
    def load(cls, folder: str | Path) -> Cluster:
        state = json.loads((Path(folder) / "state.json").read_text())
        state["nodes"] = [Node(**node) for node in state["nodes"]]
        return cls(**state)

    def save(self) -> None:
        (Path(self.folder) / "state.json").write_text(json.dumps(asdict(self), indent=2))

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_client_port}"

    def url(self, database: str = "postgres", **params: str | int) -> str:
        """libpq's multi-host URL of the three servers, which connects to the one that takes writes."""
        hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in self.nodes)
        query = "&".join(
            f"{key}={value}" for key, value in {"target_session_attrs": "read-write", **params}.items()
        )
        return f"postgresql://postgres@{hosts}/{database}?{query}"

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def _patroni_config(self, node: Node) -> str:
        # JSON is YAML: no YAML writer is needed. trust on loopback only; production uses scram (the docs).
        config = {
            "scope": SCOPE,
            "namespace": "/service/",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{node.api_port}",
                "connect_address": f"127.0.0.1:{node.api_port}",
            },
            # etcd's v2 API, not etcd3: Patroni 3.0.2's etcd3 driver renews the leader key after a pause by
            # writing it unconditionally under a new lease, from its cached view, so a primary resumed after
            # a hang longer than ttl takes the key back from the promoted standby (two timelines, acknowledged
            # commits lost: seen in round 2 of tests/ha). The v2 driver renews with compare-and-swap
            # (prevValue=its name), which fails once another node holds the key, and it then demotes.
            "etcd": {"hosts": [f"127.0.0.1:{self.etcd_client_port}"]},
            "bootstrap": {
                "dcs": {
                    **self.timeouts,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": True,
                    "synchronous_node_count": 1,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "wal_log_hints": "on",
                            "hot_standby": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_keep_size": "256MB",
                            "max_connections": 50,
                            "synchronous_commit": "on",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "data-checksums"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data_dir),
                "bin_dir": str(PG_BIN),
                "pgpass": str(Path(node.folder) / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "replicator"},
                    "rewind": {"username": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                "parameters": {
                    "unix_socket_directories": str(Path(self.folder) / "sockets"),
                    "shared_buffers": "32MB",
                    "fsync": "on",
                },
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }
        return json.dumps(config, indent=2)

    # ---- processes ----------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        """Starts etcd, then the first node (which bootstraps the primary), then the two standbys; returns
        once a primary and two streaming standbys are up, one of them synchronous."""
        deadline = time.monotonic() + timeout
        self._spawn("etcd", self._etcd_command(), Path(self.folder) / "etcd.log")
        _wait(lambda: _http_ok(f"{self.etcd_url}/health"), deadline, "etcd to answer /health", self)
        first, *others = self.nodes
        self._spawn(first.name, [PATRONI, str(first.config_file)], first.log_file)
        _wait(
            lambda: (first.api("primary") or {}).get("role") == "master", deadline, "the first primary", self
        )
        for node in others:
            self._spawn(node.name, [PATRONI, str(node.config_file)], node.log_file)
        self.wait_healthy(deadline - time.monotonic())

    def _etcd_command(self) -> list[str]:
        client, peer = f"http://127.0.0.1:{self.etcd_client_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            ETCD,
            "--name=ha",
            f"--data-dir={Path(self.folder) / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=ha={peer}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={SCOPE}-{self.etcd_peer_port}",
            "--heartbeat-interval=100",
            "--election-timeout=1000",
            "--enable-v2=true",
            "--log-level=warn",
        ]

    def _spawn(self, key: str, command: list[str], log: Path) -> None:
        user = _postgres_user()
        with open(log, "ab") as out:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": self.folder},
                **({"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}),
            )
        self.pids[key] = process.pid
        self.save()

    def stop(self, grace: float = 15.0) -> None:
        """Stops Patroni (which stops its PostgreSQL), then etcd; kills whatever is left after `grace`
        seconds, and any process still running out of the folder. Safe to call more than once, and on a
        half-started topology."""
        for node in self.nodes:
            for pid in node.postgres_pids():
                _signal(pid, signal.SIGCONT)  # a hung (SIGSTOPped) server cannot stop
        patronis = [self.pids[node.name] for node in self.nodes if self._ours(self.pids.get(node.name))]
        for pid in patronis:
            _signal(pid, signal.SIGCONT)
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in patronis):
            time.sleep(0.1)
        for node in self.nodes:
            for pid in node.postgres_pids():
                _signal(pid, signal.SIGKILL)
        for pid in patronis:
            _signal(pid, signal.SIGKILL)
        etcd = self.pids.get("etcd")
        if self._ours(etcd):
            _signal(etcd, signal.SIGTERM)
            _wait_gone([etcd], 5.0)
            _signal(etcd, signal.SIGKILL)
        leftovers = self.processes()
        for pid in leftovers:
            _signal(pid, signal.SIGKILL)
        _wait_gone(leftovers + patronis + ([etcd] if etcd else []), 5.0)
        _reap([*patronis, *([etcd] if etcd else [])])

    def processes(self) -> list[int]:
        """Every live process started out of this folder: its etcd, Patronis, and postgres processes."""
        found = set()
        for node in self.nodes:
            found.update(node.postgres_pids())
        for pid in _all_pids():
            if self._ours(pid):
                found.add(pid)
        return sorted(found)

    def _ours(self, pid: int | None) -> bool:
        """True when `pid` is alive and was started out of this folder (not a pid the system reused)."""
        if pid is None or not _alive(pid):
            return False
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            return False
        if pid in _ancestry():  # this command itself, or the shell that runs it from the folder
            return False
        ran_here = cwd == self.folder or cwd.startswith(self.folder + "/")
        names_it = self.folder in command and any(name in command for name in ("patroni", "etcd", "postgres"))
        return ran_here or names_it

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    # ---- what the manager says ----------------------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the members (name, role, state, lag, timeline), from any node that answers."""
        for node in self.nodes:
            answer = node.api("cluster", timeout=1.0)
            if answer and "members" in answer:
                return answer["members"]
        return []

    def leader(self) -> Node | None:
        """The node Patroni holds as the running leader (its key in etcd), if any."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return self.node(member["name"])
        return None

    def healthy(self) -> bool:
        """A running leader, a synchronous standby and a second standby, both streaming from it."""
        members = self.members()
        roles = sorted(member.get("role", "") for member in members)
        states = {member.get("state") for member in members}
        return roles == ["leader", "replica", "sync_standby"] and states <= {"running", "streaming"}

    def wait_healthy(self, timeout: float = 60.0) -> None:
        _wait(
            self.healthy, time.monotonic() + timeout, "a leader with a sync standby and a streaming one", self
        )

    def describe(self) -> str:
        lines = [f"folder {self.folder}, etcd {self.etcd_url}", f"url {self.url()}"]
        for member in self.members() or [{"name": "?", "role": "no node answers"}]:
            lines.append(
                f"  {member.get('name')}: {member.get('role')} {member.get('state', '')} "
                f"port {member.get('port', '')} timeline {member.get('timeline', '')} "
                f"lag {member.get('lag', '')}"
            )
        return "\n".join(lines)

    def log_tail(self, lines: int = 25) -> str:
        parts = []
        for path in [*(node.log_file for node in self.nodes), Path(self.folder) / "etcd.log"]:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(parts)


# ---- process helpers --------------------------------------------------------------------------------------


def _postgres_user() -> pwd.struct_passwd | None:
    """The `postgres` account when running as root (PostgreSQL will not run as root), else None."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError as error:
        raise ClusterProblem(
            "running as root but there is no `postgres` user to run PostgreSQL as"
        ) from error


def _hand_to_postgres(base: Path) -> None:
    user = _postgres_user()
    if user is None:
        return
    for path in [base, *base.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)
    base.chmod(0o700)


def _reap(pids: list[int]) -> None:
    """Collects the exit status of those of `pids` this process started (etcd, the Patronis), so that they
    leave no zombie behind; the others are not its children and are left alone."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _ancestry() -> set[int]:
    """This process and its ancestors."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _children(parent: int) -> list[int]:
    children = []
    for pid in _all_pids():
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent:
            children.append(pid)
    return children


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _wait_gone(pids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return response.status == 200
    except OSError:
        return False


def _wait(condition: Any, deadline: float, what: str, cluster: Cluster) -> None:
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise ClusterProblem(f"timed out waiting for {what}\n{cluster.describe()}\n{cluster.log_tail()}")


# ---- command line -----------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("start", "stop", "status", "url"):
        print(__doc__.rsplit("Usage: ", 1)[1].strip(), file=sys.stderr)
        return 2
    command, folder = argv[0], (argv[1] if len(argv) > 1 else None)
    if command == "start":
        if missing_packages():
            print(
                f"ha-cluster: missing {', '.join(missing_packages())}; as root: {APT_INSTALL}",
                file=sys.stderr,
            )
            return 1
        cluster = Cluster.create(folder)
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        print(cluster.describe(), file=sys.stderr)
        print(f"ha-cluster: stop it with: scripts/ha-cluster stop {cluster.folder}", file=sys.stderr)
        print(cluster.url())
        return 0
    if folder is None:
        print(f"ha-cluster: {command} needs the topology's folder", file=sys.stderr)
        return 2
    cluster = Cluster.load(folder)
    if command == "stop":
        cluster.stop()
        left = cluster.processes()
        print(f"ha-cluster: stopped; {len(left)} process(es) left {left}", file=sys.stderr)
        return 1 if left else 0
    if command == "url":
        print(cluster.url())
        return 0
    print(cluster.describe())
    return 0 if cluster.healthy() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
