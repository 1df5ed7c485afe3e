"""What synchronous replication costs: bench/load.py's buys against one PostgreSQL server and against a
primary with two standbys under Patroni (tests/ha/cluster.py), side by side in one run, as ratios; then GETs
of the read models served by the primary, by one standby and by two standbys.

Run (wrk, patroni and etcd-server installed: `scripts/bench-tools`, `scripts/ha-cluster install`):

    .venv/bin/python bench/replication_cost.py [--seconds 10] [--customers 500] [--connections 64]
        [--rounds 2] [--workers 2] [--read-seconds 5] [--read-rounds 2] [--read-connections 64]
        [--no-reads] [--markdown]

What it does, in order (everything on this machine, on loopback; the machine's PostgreSQL is not used):
1. Starts the topology of `scripts/ha-cluster` in a temp folder: etcd, and Patroni with a primary and two
   streaming standbys, `synchronous_mode` (Patroni 3.0.2 names one of them in `synchronous_standby_names`;
   the other streams asynchronously: docs/high-availability.md), with Patroni's own default timeouts (ttl
   30, loop_wait 10, retry_timeout 10: the production settings, not the tests' faster ones), and
   max_connections 100 and shared_buffers 128MB (PostgreSQL's defaults, as the machine's server that
   bench/load.py uses has; the tests' topology has 50 and 32MB).
2. Starts "one server": Debian's PostgreSQL 15 binaries, a data directory initialised as Patroni's (UTF8,
   locale C, data checksums) in a temp folder, on a free loopback port, with every setting the topology's
   primary took from its configuration or command line (`pg_settings`) except its port, socket folder,
   cluster name and `synchronous_standby_names`. So the two differ by the standbys alone: the same
   wal_level, fsync, synchronous_commit, checkpoints, autovacuum, buffers.
3. On each, a fresh database; `broker-ledger serve --workers N --no-projections` beside `broker-ledger
   projections run` (bench/load.py's `--projections separate`, the command docs/performance.md gives), the
   one server's with its URL, the topology's with the libpq multi-host URL (`target_session_attrs=
   read-write`), both with bench/load.py's settings, customers and warm-up (the two sides set up at the
   same time, not measured); and a floor app (bench/floor_app.py) on each. All of it stays up, idle but for
   the side driven.
4. For each connection count: the floor on each side, then `--rounds` rounds of the buys on each side
   (bench/load.py's run: wrk with bench/wrk_buy.lua, lag and serial-point sampling, CPU from wrk's start until
   the projections caught up), the order alternating (one server then the topology, then the topology then
   one server: a drift of the shared machine's speed falls on both alike), then the floor on each side again.
   So both sides' buys are bracketed by the same floors, and the floors compare the two servers on the least
   a request can store. Printed per run and for the rounds together: created buys/s, its share of the one
   server's floor and of its own side's, CPU per buy (the machine, which counts whatever else the machine
   ran; the measured processes: the API workers, the projections, PostgreSQL: the server written to and the
   standbys, Patroni and etcd), the serial point (the events table's lock is held through COMMIT, which now
   waits for the synchronous standby), and the ratios topology / one server.
5. Reads (without --no-reads): the services and the floors stopped, three `serve --no-projections` on the
   topology side by side, with the write side's var folder (replicas of one service), idle but for the one
   driven: reads of the read models on the primary (no BROKER_LEDGER_READ_DATABASE_URL), on one standby, on
   both standbys (BROKER_LEDGER_READ_DATABASE_URL listing them, `target_session_attrs=prefer-standby`,
   `load_balance_hosts=random`). `--read-rounds` rounds, the order reversed each round, of wrk with
   bench/wrk_get.lua for --read-seconds (GET /transactions/custodian?customerCode=...&pageSize=20, cycling
   over the customers; 2 s of it not measured before each reader's first run). Printed: GETs/s, latency, CPU
   per GET (the machine, the API workers, PostgreSQL per node) and the reader's connections on each node to
   the database (pg_stat_activity's client ports that its processes hold), read at the end of each run.
6. Stops everything: the services, the one server (its folder removed), Patroni, PostgreSQL and etcd (the
   topology's folder removed); says so if a process was left.

The load generator, the API, the projections, the primary and both standbys share this machine's cores, so
the figures are the CPU a synchronous standby costs and the latency of a commit that waits for a standby
over loopback, not over a network; and reads served by standbys cannot add cores here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.cpu import CpuMeter
from bench.lag import tracking_tables
from bench.load import (
    CUSTOMER_PREFIX,
    floor_run,
    load_run,
    note,
    projection_process,
    settle,
    warm_up,
)
from bench.load_report import FloorRun, LoadRun, table
from bench.load_support import (
    ROOT,
    VENV_BIN,
    Process,
    WrkResult,
    bench_settings,
    broker_token,
    children,
    create_customers,
    free_port,
    fresh_database,
    run_wrk,
    running,
    scalar,
    server_env,
)
from projections.catalog import PROJECTIONS
from tests.ha.cluster import PG_BIN, Cluster, Node, missing_packages

PATRONI_DEFAULTS = {"ttl": 30, "loop_wait": 10, "retry_timeout": 10}  # Patroni's own defaults
# PostgreSQL's defaults (the machine's server runs with them), where the tests' topology keeps 50 and 32MB
DCS_PARAMETERS = {"max_connections": "100"}
LOCAL_PARAMETERS = {"shared_buffers": "128MB"}
NOT_COPIED = {  # the primary's settings that are its own, or the replication's
    "port",
    "listen_addresses",
    "unix_socket_directories",
    "cluster_name",
    "synchronous_standby_names",
    "hot_standby",
}
TOPOLOGY_START_SECONDS = 180
READ_URL_KEY = "BROKER_LEDGER_READ_DATABASE_URL"
READ_PAGE_SIZE = "20"
READ_WARM_UP_SECONDS = 2
WRK_GET = Path(__file__).with_name("wrk_get.lua")
MACHINE = "whole machine"
ONE = "one server"
HA = "primary + 2 standbys"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=10, help="duration of each wrk run")
    parser.add_argument("--workers", type=int, default=2, help="API workers of each service")
    parser.add_argument("--connections", default="64", help="comma-separated, the buys' runs")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds of the buys per connection count (order alternating)"
    )
    parser.add_argument("--read-connections", type=int, default=64, help="wrk connections of the GETs")
    parser.add_argument("--read-seconds", type=int, default=5, help="duration of each wrk run of the GETs")
    parser.add_argument(
        "--read-rounds", type=int, default=2, help="rounds of the three read set-ups (order alternating)"
    )
    parser.add_argument("--no-reads", action="store_true", help="measure the buys only")
    parser.add_argument(
        "--projection-processes",
        default=os.environ.get("BENCH_PROJECTION_PROCESSES", "auto"),
        help="`projections run --processes` of each side (a number, or auto)",
    )
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = parser.parse_args()
    args.connections = [int(count) for count in args.connections.split(",") if count.strip()]
    args.without_keys = False  # bench/load.py's runs read it
    return args


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the `finally`s stop everything
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed; it drives the load. Install it with: scripts/bench-tools")
    if missing_packages():
        sys.exit(f"missing {', '.join(missing_packages())}: scripts/ha-cluster install")
    begun, load = time.monotonic(), Path("/proc/loadavg").read_text().split()[0]
    with (
        tempfile.TemporaryDirectory(prefix="bench-replication-") as temporary,
        topology() as cluster,
        single_server(primary_parameters(cluster.url())) as single,
    ):
        directory = Path(temporary)
        roles = ", ".join(f"{member['name']} {member['role']}" for member in cluster.members())
        settings = directory / "settings.toml"
        bench_settings(settings)
        sides = [one_server_side(single, directory), topology_side(cluster, directory)]
        try:
            with contextlib.ExitStack() as one, contextlib.ExitStack() as ha:
                # the two sides are set up side by side (not measured): about a minute less
                with ThreadPoolExecutor(2) as pool:
                    stacks = zip((one, ha), sides, strict=True)
                    started = [pool.submit(start_side, stack, side, settings, args) for stack, side in stacks]
                for future in started:
                    future.result()
                measure_buys(sides, args)
            reads = [] if args.no_reads else measure_reads(cluster, sides[1], settings, args)
        except RuntimeError as error:
            sys.exit(f"benchmark failed: {error}")
    note(f"everything stopped; {time.monotonic() - begun:.0f} s in all")
    print(
        f"{time.monotonic() - begun:.0f} s in all; the machine's load average (1 min) {load} at the start, "
        f"{Path('/proc/loadavg').read_text().split()[0]} at the end, on {os.cpu_count()} cores; "
        f"the topology: {roles}"
    )
    print_buys(sides, args)
    if reads:
        print_reads(reads, args)


# --- the two servers ------------------------------------------------------------------------------------


class BenchCluster(Cluster):
    """The tests' topology with PostgreSQL's default max_connections and shared_buffers (two services, two
    floor apps and the samplers at 64 connections pass the tests' 50)."""

    def _patroni_config(self, node: Node) -> str:
        config = json.loads(super()._patroni_config(node))
        config["bootstrap"]["dcs"]["postgresql"]["parameters"].update(DCS_PARAMETERS)
        config["postgresql"]["parameters"].update(LOCAL_PARAMETERS)
        return json.dumps(config, indent=2)


@contextlib.contextmanager
def topology() -> Iterator[Cluster]:
    """The primary, two standbys, Patroni and etcd, started in a temp folder; stopped and removed after."""
    cluster = BenchCluster.create(timeouts=PATRONI_DEFAULTS)
    note(f"starting the topology (Patroni, etcd) in {cluster.folder}")
    try:
        cluster.start(timeout=TOPOLOGY_START_SECONDS)
        note(cluster.describe().replace("\n", "; "))
        yield cluster
    finally:
        note("stopping the topology")
        cluster.stop()
        for pid in cluster.pids.values():  # etcd and the Patronis are this process's children: reaped here
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        left = cluster.processes()
        cluster.remove()
        if left:
            note(f"WARNING: the topology left processes running: {left}")


def primary_parameters(url: str) -> dict[str, str]:
    """The settings the primary took from its configuration file or command line, less its own ones."""
    query = (
        "SELECT name, current_setting(name) FROM pg_settings "
        "WHERE source IN ('configuration file', 'command line') ORDER BY name"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(query).fetchall()
    return {name: value for name, value in rows if name not in NOT_COPIED}


@dataclass
class SingleServer:
    """A PostgreSQL server of its own in a temp folder (Debian's PostgreSQL 15), run as `postgres` when this
    is root, on a free loopback port."""

    folder: Path
    port: int
    popen: subprocess.Popen[bytes] | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def pids(self) -> list[int]:
        if self.popen is None or self.popen.poll() is not None:
            return []
        return [self.popen.pid, *children(self.popen.pid)]

    def start(self, parameters: dict[str, str]) -> None:
        user = _postgres_user()
        as_user: dict[str, Any] = (
            {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
        )
        if user:
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.folder)}
        data = self.folder / "data"
        initdb = [str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
        initdb += ["--encoding=UTF8", "--locale=C", "--data-checksums"]
        done = subprocess.run(initdb, cwd=self.folder, env=env, capture_output=True, text=True, **as_user)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stdout[-1000:]}{done.stderr[-1000:]}")
        own = {
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.folder),
        }
        lines = [
            f"{name} = '{value.replace(chr(39), chr(39) * 2)}'"
            for name, value in {**parameters, **own}.items()
        ]
        with (data / "postgresql.conf").open("a") as conf:
            conf.write("\n# bench/replication_cost.py: the topology's primary's settings\n")
            conf.write("\n".join(lines) + "\n")
        with (self.folder / "postgres.log").open("ab") as log:
            self.popen = subprocess.Popen(
                [str(PG_BIN / "postgres"), "-D", str(data)],
                cwd=self.folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **as_user,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.popen.poll() is not None or time.monotonic() > deadline:
                    log_text = (self.folder / "postgres.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the single server did not start:\n{log_text}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        """A fast shutdown (SIGINT to the postmaster), SIGKILL to its session if it lingers."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGINT)
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


def _postgres_user() -> pwd.struct_passwd | None:
    """The `postgres` account when this runs as root (PostgreSQL will not run as root), else None."""
    return pwd.getpwnam("postgres") if os.geteuid() == 0 else None


@contextlib.contextmanager
def single_server(parameters: dict[str, str]) -> Iterator[SingleServer]:
    server = SingleServer(Path(tempfile.mkdtemp(prefix="bench-one-server-")), free_port())
    note(f"starting one server on port {server.port} with the primary's {len(parameters)} settings")
    try:
        server.start(parameters)
        yield server
    finally:
        note("stopping the one server")
        server.stop()
        shutil.rmtree(server.folder, ignore_errors=True)


# --- the two sides --------------------------------------------------------------------------------------


@dataclass
class Side:
    name: str
    url: str  # the benchmark database
    directory: Path
    postgres: dict[str, Callable[[], list[int]]]  # CPU parts: its PostgreSQL (and the manager)
    server: Process | None = None
    floor: Process | None = None
    token: str = ""
    tables: list[str] = field(default_factory=list)
    cpu_parts: dict[str, Callable[[], list[int]]] = field(default_factory=dict)
    runs: list[LoadRun] = field(default_factory=list)
    floors: list[FloorRun] = field(default_factory=list)
    incidents: list[str] = field(default_factory=list)


def one_server_side(single: SingleServer, directory: Path) -> Side:
    name, url = fresh_database(single.url())
    note(f"{ONE}: database {name} on port {single.port}")
    return Side(ONE, url, directory / "one", {"PostgreSQL written to": single.pids})


def topology_side(cluster: Cluster, directory: Path) -> Side:
    name, url = fresh_database(cluster.url())
    leader = cluster.leader()
    if leader is None:
        raise RuntimeError(f"the topology has no leader:\n{cluster.describe()}")
    standbys = [node for node in cluster.nodes if node is not leader]
    manager = [pid for key, pid in cluster.pids.items() if key == "etcd" or key.startswith("node")]
    note(f"{HA}: database {name}, primary {leader.name}")
    return Side(
        HA,
        url,
        directory / "ha",
        {
            "PostgreSQL written to": leader.postgres_pids,
            "PostgreSQL standbys": lambda: [pid for node in standbys for pid in node.postgres_pids()],
            "Patroni and etcd": lambda: list(manager),
        },
    )


def start_side(stack: contextlib.ExitStack, side: Side, settings: Path, args: argparse.Namespace) -> None:
    """The side's floor app, its service with a projections process, customers and warm-up."""
    side.directory.mkdir()
    env = server_env(side.url, side.directory / "var")
    floor_port = free_port()
    floor_command = [sys.executable, "-m", "bench.floor_app", "--port", str(floor_port)]
    floor_command += ["--workers", str(args.workers)]
    floor_env = {**os.environ, "DATABASE_URL": side.url}
    side.floor = stack.enter_context(
        running(floor_command, floor_env, side.directory / "floor.log", "/health")
    )
    note(f"{side.name}: starting broker-ledger serve with {args.workers} workers and a projections process")
    projections = stack.enter_context(
        projection_process(env, settings, side.directory, args.projection_processes)
    )
    command = [str(VENV_BIN / "broker-ledger"), "serve", "--workers", str(args.workers), "--no-projections"]
    command += ["--port", str(free_port()), "--settings", str(settings)]
    server = stack.enter_context(running(command, env, side.directory / "server.log", "/health"))
    side.server = server
    side.cpu_parts = {
        "API workers": server.worker_pids,
        "projections": lambda: [projections.pid, *children(projections.pid)],
        **side.postgres,
    }
    side.token = broker_token(server.base_url, side.directory / "var")
    note(f"{side.name}: creating {args.customers} customers with accounts")
    create_customers(server.base_url, side.token, [f"{CUSTOMER_PREFIX}{i}" for i in range(args.customers)])
    side.tables = tracking_tables(side.url, len(PROJECTIONS))
    warm_up(server, side.url, side.token, args)
    settle(side.url, side.tables)


def measure_buys(sides: list[Side], args: argparse.Namespace) -> None:
    """Per connection count: each side's floor, the buys in rounds whose order alternates (one server, the
    topology; the topology, one server; ...), each side's floor again."""
    one, ha = sides
    for connections in args.connections:
        for side in (one, ha):
            note(f"{side.name}: the floor")
            floor = floor_run(side.floor, side.url, connections, args, "before", side.postgres)
            side.floors.append(floor)
        for round_ in range(args.rounds):
            for side in [one, ha] if round_ % 2 == 0 else [ha, one]:
                note(f"{side.name}: the buys, round {round_ + 1}")
                run = load_run(
                    side.server,
                    side.url,
                    side.token,
                    side.tables,
                    connections,
                    args,
                    side.cpu_parts,
                    f"r{round_}",
                )
                side.runs.append(run)
        for side in (ha, one):
            note(f"{side.name}: the floor")
            side.floors.append(floor_run(side.floor, side.url, connections, args, "after", side.postgres))
    for side in sides:
        side.incidents = side.server.incidents()


# --- reads ----------------------------------------------------------------------------------------------


@dataclass
class Reader:
    """A service whose reads of the read models go where `url` says (the primary when None)."""

    setup: str
    url: str | None
    server: Process | None = None
    token: str = ""


@dataclass
class ReadRun:
    setup: str
    round: int
    wrk: WrkResult
    cpu_seconds: dict[str, float]
    connections_by_node: dict[str, int]
    incidents: list[str]  # trouble in the reader's log so far
    warnings: list[str]  # its WARNING lines so far (e.g. a read the primary served in the standby's stead)


def measure_reads(cluster: Cluster, ha: Side, settings: Path, args: argparse.Namespace) -> list[ReadRun]:
    """GETs of the read models with reads on the primary, one standby, both standbys: three services side by
    side on the topology's database (the write side's var folder: replicas of one service), each idle but
    for the one driven, in rounds whose order alternates."""
    database = ha.url.rsplit("/", 1)[1].split("?", 1)[0]
    leader = cluster.leader()
    if leader is None:
        raise RuntimeError(f"the topology has no leader:\n{cluster.describe()}")
    standbys = [node for node in cluster.nodes if node is not leader]
    wait_replayed(leader, standbys)
    if READ_URL_KEY not in (ROOT / "interface" / "environment.py").read_text():
        note(f"WARNING: the service does not read {READ_URL_KEY} yet: every read will go to the primary")
    readers = [
        Reader(f"primary ({leader.name})", None),
        Reader(f"one standby ({standbys[0].name})", read_url([standbys[0]], database)),
        Reader(f"two standbys ({standbys[0].name}, {standbys[1].name})", read_url(standbys, database)),
    ]
    runs = []
    with contextlib.ExitStack() as stack:
        stacks = [stack.enter_context(contextlib.ExitStack()) for _ in readers]  # one a thread
        with ThreadPoolExecutor(len(readers)) as pool:
            pairs = zip(stacks, readers, strict=True)
            started = [pool.submit(start_reader, own, reader, ha, settings, args) for own, reader in pairs]
        for future in started:
            future.result()
        for round_ in range(args.read_rounds):
            for reader in readers if round_ % 2 == 0 else reversed(readers):
                runs.append(read_run(cluster, reader, args, round_, database))
        note("stopping the readers")
    return runs


def read_url(standbys: list[Node], database: str) -> str:
    hosts = ",".join(f"127.0.0.1:{node.pg_port}" for node in standbys)
    params = "target_session_attrs=prefer-standby" + (
        "&load_balance_hosts=random" if len(standbys) > 1 else ""
    )
    return f"postgresql://postgres@{hosts}/{database}?{params}"


def wait_replayed(leader: Node, standbys: list[Node], timeout: float = 60) -> None:
    """Until each standby has replayed the primary's WAL up to now."""
    with psycopg.connect(leader.url(), autocommit=True) as conn:
        target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    deadline = time.monotonic() + timeout
    for node in standbys:
        query = f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
        while not scalar(node.url(), query):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node.name} did not replay the primary's WAL within {timeout} s")
            time.sleep(0.1)


def start_reader(
    stack: contextlib.ExitStack, reader: Reader, ha: Side, settings: Path, args: argparse.Namespace
) -> None:
    env = server_env(ha.url, ha.directory / "var")
    if reader.url:
        env[READ_URL_KEY] = reader.url
    command = [str(VENV_BIN / "broker-ledger"), "serve", "--workers", str(args.workers), "--no-projections"]
    command += ["--port", str(free_port()), "--settings", str(settings)]
    log = ha.directory / f"reads-{reader.setup.split()[0]}.log"
    where = f" with {READ_URL_KEY}={reader.url}" if reader.url else ""
    note(f"reads from the {reader.setup}: starting broker-ledger serve --no-projections{where}")
    reader.server = stack.enter_context(running(command, env, log, "/health"))
    reader.token = broker_token(reader.server.base_url, ha.directory / "var")


def read_run(
    cluster: Cluster, reader: Reader, args: argparse.Namespace, round_: int, database: str
) -> ReadRun:
    server, connections = reader.server, args.read_connections
    script_args = [CUSTOMER_PREFIX, str(args.customers), READ_PAGE_SIZE]
    if round_ == 0:  # the pools' connections opened, the statements prepared
        run_wrk(server.base_url, reader.token, READ_WARM_UP_SECONDS, connections, script_args, script=WRK_GET)
    parts: dict[str, Callable[[], list[int]]] = {"API workers": server.worker_pids}
    for node in cluster.nodes:
        parts[f"PostgreSQL {node.name}"] = node.postgres_pids
    note(f"wrk: GET, reads from the {reader.setup}, {connections} connections, {args.read_seconds} s")
    cpu = CpuMeter(parts).start()
    wrk = run_wrk(server.base_url, reader.token, args.read_seconds, connections, script_args, script=WRK_GET)
    seconds = cpu.stop()
    ports = local_ports([server.popen.pid, *server.worker_pids()])
    by_node = {node.name: connections_from(node, database, ports) for node in cluster.nodes}
    warnings = [line for line in server.log.read_text(errors="replace").splitlines() if "WARNING" in line]
    return ReadRun(reader.setup, round_ + 1, wrk, seconds, by_node, server.incidents(), warnings)


def local_ports(pids: list[int]) -> set[int]:
    """The local TCP ports of the sockets these processes hold (/proc: their fds' socket inodes, found in
    /proc/net/tcp and tcp6)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports = set()
    for table_ in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table_).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def connections_from(node: Node, database: str, ports: set[int]) -> int:
    """The connections to the benchmark's database on this node that come from these local ports."""
    query = (
        "SELECT client_port FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' "
        "AND pid <> pg_backend_pid()"
    )
    with psycopg.connect(node.url(), autocommit=True) as conn:
        return sum(port in ports for (port,) in conn.execute(query, (database,)))


# --- the figures ----------------------------------------------------------------------------------------


SERVERS = ("PostgreSQL written to", "PostgreSQL standbys")
BUY_PARTS = ("API workers", "projections", *SERVERS, "Patroni and etcd")
FLOOR_PARTS = ("floor workers", *SERVERS, "Patroni and etcd")


@dataclass
class Totals:
    """Runs taken together: their 2xx per second over their whole time, and CPU seconds per part."""

    seconds: float
    ok: int
    units: int  # buys or floor saves stored
    cpu: dict[str, float]

    @classmethod
    def of(cls, runs: list[LoadRun] | list[FloorRun]) -> Totals:
        cpu: dict[str, float] = {}
        for run in runs:
            for part, seconds in run.cpu_seconds.items():
                cpu[part] = cpu.get(part, 0.0) + seconds
        units = sum(run.stored_buys if isinstance(run, LoadRun) else run.stored for run in runs)
        return cls(sum(run.wrk.seconds for run in runs), sum(run.wrk.ok for run in runs), units, cpu)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    def ms(self, *parts: str) -> float:
        """CPU ms per unit of the parts together (0 when none stored)."""
        return 1000 * sum(self.cpu.get(part, 0.0) for part in parts) / self.units if self.units else 0.0


def measured(parts: tuple[str, ...], cpu: dict[str, float]) -> tuple[str, ...]:
    """The parts a run measured (the one server has no standbys, Patroni or etcd)."""
    return tuple(part for part in parts if part in cpu)


def print_buys(sides: list[Side], args: argparse.Namespace) -> None:
    print(
        "\nBuys (POST /brokerbuy, committed at once, Idempotency-Key), "
        f"{args.seconds} s runs, {args.workers} workers; CPU ms per buy stored"
    )
    headers = ["connections", "round", "side", "created buys/s", "buys stored"]
    headers += ["share of the one server's floor", "share of its own floor", "machine", "measured processes"]
    headers += [*BUY_PARTS, "p50 ms", "p99 ms"]
    headers += ["non-2xx", "lock held per commit ms", "buys per commit"]
    rows = []
    for connections in args.connections:
        reference = Totals.of(floors_at(sides[0], connections)).rate
        for side in sides:
            floors = (reference, Totals.of(floors_at(side, connections)).rate)
            runs = [run for run in side.runs if run.wrk.connections == connections]
            for index, run in enumerate(runs):
                serial = run.serial
                tail = [
                    f"{run.wrk.latency_ms['p50']:.1f}",
                    f"{run.wrk.latency_ms['p99']:.1f}",
                    str(run.wrk.refused + sum(run.wrk.socket_errors.values())),
                    f"{serial.held_ms:.3f}" if serial else "n/a",
                    f"{serial.buys_per_commit:.2f}" if serial else "n/a",
                ]
                rows.append(buy_row(connections, str(index + 1), side, Totals.of([run]), floors, tail))
            if len(runs) > 1:
                rows.append(buy_row(connections, "together", side, Totals.of(runs), floors, ["-"] * 5))
    print(table(headers, rows, "lll" + "r" * (len(headers) - 3), args.markdown))
    print_floors(sides, args)
    print_ratios(sides, args)
    for side in sides:
        if side.incidents:
            print(f"\n{side.name}: {len(side.incidents)} trouble line(s) in the server's log, the first:")
            print(side.incidents[0][:1000])


def buy_row(
    connections: int, label: str, side: Side, totals: Totals, floors: tuple[float, float], tail: list[str]
) -> list[str]:
    """A row of the buys' table; `floors`: the one server's floor and the side's own, saves/s."""
    shares = [f"{100 * totals.rate / floor:.1f} %" if floor else "n/a" for floor in floors]
    return [
        str(connections),
        label,
        side.name,
        f"{totals.rate:,.0f}",
        f"{totals.units:,}",
        *shares,
        f"{totals.ms(MACHINE):.2f}",
        f"{totals.ms(*measured(BUY_PARTS, totals.cpu)):.2f}",
        *(f"{totals.ms(part):.2f}" if part in totals.cpu else "-" for part in BUY_PARTS),
        *tail,
    ]


def print_floors(sides: list[Side], args: argparse.Namespace) -> None:
    print(
        "\nThe floor (bench/floor_app.py: one event saved per request), each side's runs before and after "
        "the buys together; CPU ms per save stored"
    )
    headers = ["connections", "side", "runs saves/s", "saves/s", "machine", "measured processes"]
    headers += FLOOR_PARTS
    rows = []
    for connections in args.connections:
        for side in sides:
            floors = floors_at(side, connections)
            totals = Totals.of(floors)
            rows.append(
                [
                    str(connections),
                    side.name,
                    " / ".join(f"{run.wrk.ok_per_second:,.0f}" for run in floors),
                    f"{totals.rate:,.0f}",
                    f"{totals.ms(MACHINE):.2f}",
                    f"{totals.ms(*measured(FLOOR_PARTS, totals.cpu)):.2f}",
                    *(f"{totals.ms(part):.2f}" if part in totals.cpu else "-" for part in FLOOR_PARTS),
                ]
            )
    print(table(headers, rows, "llr" + "r" * (len(headers) - 3), args.markdown))


def print_ratios(sides: list[Side], args: argparse.Namespace) -> None:
    print(f"\nRatios, {HA} / {ONE} (the rounds together)")
    headers = ["connections", "created buys/s", "machine CPU per buy", "measured processes CPU per buy"]
    headers += ["PostgreSQL CPU per buy (its servers)", "API CPU per buy", "floor saves/s"]
    headers += ["floor machine CPU per save", "floor PostgreSQL CPU per save (its servers)"]
    rows = []
    for connections in args.connections:
        figures = []
        for side in sides:
            buys = Totals.of([run for run in side.runs if run.wrk.connections == connections])
            floor = Totals.of(floors_at(side, connections))
            figures.append(
                (
                    buys.rate,
                    buys.ms(MACHINE),
                    buys.ms(*measured(BUY_PARTS, buys.cpu)),
                    buys.ms(*SERVERS),
                    buys.ms("API workers"),
                    floor.rate,
                    floor.ms(MACHINE),
                    floor.ms(*SERVERS),
                )
            )
        single, replicated = figures
        ratios = (f"{b / a:.2f}x" if a else "n/a" for a, b in zip(single, replicated, strict=True))
        rows.append([str(connections), *ratios])
    print(table(headers, rows, "l" + "r" * (len(headers) - 1), args.markdown))


def floors_at(side: Side, connections: int) -> list[FloorRun]:
    return [run for run in side.floors if run.wrk.connections == connections]


def print_reads(reads: list[ReadRun], args: argparse.Namespace) -> None:
    nodes = [part for part in reads[0].cpu_seconds if part.startswith("PostgreSQL ")]
    print(
        f"\nReads (GET /transactions/custodian?customerCode=...&pageSize={READ_PAGE_SIZE}), "
        f"{args.read_seconds} s runs, {args.read_connections} connections, {args.workers} workers; "
        "CPU ms per GET answered 2xx"
    )
    headers = ["reads from", "round", "GETs/s (2xx)", "p50 ms", "p99 ms", "non-2xx", "machine"]
    headers += ["measured processes", "API workers", *nodes, "the service's connections per node"]
    rows = []
    for run in reads:
        totals = Totals(run.wrk.seconds, run.wrk.ok, run.wrk.ok, run.cpu_seconds)
        rows.append(
            [
                run.setup,
                str(run.round),
                f"{totals.rate:,.0f}",
                f"{run.wrk.latency_ms['p50']:.1f}",
                f"{run.wrk.latency_ms['p99']:.1f}",
                str(run.wrk.refused + sum(run.wrk.socket_errors.values())),
                f"{totals.ms(MACHINE):.2f}",
                f"{totals.ms('API workers', *nodes):.2f}",
                f"{totals.ms('API workers'):.2f}",
                *(f"{totals.ms(node):.2f}" for node in nodes),
                ", ".join(f"{name} {count}" for name, count in run.connections_by_node.items()),
            ]
        )
    print(table(headers, rows, "ll" + "r" * (len(headers) - 3) + "l", args.markdown))
    print("\nReads, the rounds together")
    headers = ["reads from", "GETs/s (2xx)", "vs the primary", "machine ms/GET", "measured processes ms/GET"]
    headers += [f"{node} ms/GET" for node in nodes]
    rows, base = [], 0.0
    for setup in dict.fromkeys(run.setup for run in reads):
        runs = [run for run in reads if run.setup == setup]
        cpu: dict[str, float] = {}
        for run in runs:
            for part, seconds in run.cpu_seconds.items():
                cpu[part] = cpu.get(part, 0.0) + seconds
        ok = sum(run.wrk.ok for run in runs)
        totals = Totals(sum(run.wrk.seconds for run in runs), ok, ok, cpu)
        base = base or totals.rate
        rows.append(
            [
                setup,
                f"{totals.rate:,.0f}",
                f"{totals.rate / base:.2f}x" if base else "n/a",
                f"{totals.ms(MACHINE):.2f}",
                f"{totals.ms('API workers', *nodes):.2f}",
                *(f"{totals.ms(node):.2f}" for node in nodes),
            ]
        )
    print(table(headers, rows, "l" + "r" * (len(headers) - 1), args.markdown))
    for setup in dict.fromkeys(run.setup for run in reads):
        runs = [run for run in reads if run.setup == setup]
        last, refusal = runs[-1], next((run.wrk.first_refusal for run in runs if run.wrk.first_refusal), "")
        if refusal:
            print(f"{setup}: first refusal: {refusal}")
        if last.incidents:
            print(f"{setup}: {len(last.incidents)} trouble line(s) in the server's log, the first:")
            print(last.incidents[0][:1000])
        if last.warnings:
            print(f"{setup}: {len(last.warnings)} WARNING line(s) in the server's log, the last:")
            print(last.warnings[-1][:1000])


if __name__ == "__main__":
    main()
