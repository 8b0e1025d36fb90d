"""Beyond one host, in network namespaces: the services on one host, three worker hosts, a client host.

``volunteer up --listen`` serves the broker and PostgreSQL on the database host's address (the
database refuses other hosts without its password); workers and the client reach them across a
bridge. While the client produces a seeded workload, faults hit one host at a time: a worker cut off
from the broker past the group session timeout (its partitions move, and come back after the heal),
a worker cut off from the database, the client's cable pulled mid-stream, 200 ms delay and 5 % loss
on one worker's link, every process of one worker host killed at once. A real hook call runs during
each fault. At the end the independent verifier judges the table and the topic.

The short run is in the default suite wherever namespaces can be made (root; CI runs as root);
``--long`` runs longer faults twice over. ``-s`` prints the figures (docs/guarantees.md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
import pytest

from pipeline.agents.health import LIVE_PATH, READY_PATH
from pipeline.core.brain import BrainIndex
from tests.integration.stream.harness import run as run_sync
from tests.reliability.multihost import (
    HOOK_DEADLINE_MS,
    ClientProducer,
    Cluster,
    HookCall,
    call_hook,
    start_services,
)
from tests.reliability.netns import NetnsUnavailable, Network, sweep_stale, unavailable_reason
from tests.reliability.verify import Verdict, expected_events, verify, wait_until_quiet
from tests.reliability.workload import Workload, build_workload
from tests.services.broker import new_names, settings_for
from topics.definitions import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.reliability]

SESSION_TIMEOUT_S = 3.0  # the group session timeout on the embedded broker (topics/tansu_client.py)
HOSTS = ["db", "w1", "w2", "w3", "client"]


@pytest.fixture(scope="module")
def net() -> Iterator[Network]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    sweep_stale()
    try:
        network = Network.create(HOSTS)
    except NetnsUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield network
    finally:
        network.remove()
        assert network.exists() == [], "namespaces left behind"


@pytest.fixture(scope="module")
def cluster(net: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("multihost")
    services = start_services(net["db"], root)
    settings = settings_for(services.broker, new_names(), database_url=services.database_url, topic_partitions=6)
    made = Cluster(net, services, settings, root)
    try:
        made.in_client(lambda: run_sync(ensure_topics(settings)), timeout=120)
        yield made
    finally:
        made.stop()


def test_up_listen_serves_other_hosts_and_refuses_them_without_the_password(cluster: Cluster) -> None:
    db = cluster.net["db"]
    url = cluster.services.database_url
    assert cluster.services.broker == f"tansu://{db.address}:{cluster.services.broker.rsplit(':', 1)[1]}"
    assert f"@{db.address}:" in url and url.startswith("postgresql://postgres:")
    password = url.split("postgres:", 1)[1].split("@", 1)[0]
    assert len(password) >= 24
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])

    def attempts() -> list[str]:
        out = []
        for conninfo in (url, f"postgresql://postgres@{db.address}:{port}/postgres",
                         f"postgresql://postgres:wrong@{db.address}:{port}/postgres"):
            try:
                with psycopg.connect(conninfo, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                out.append("ok")
            except psycopg.OperationalError as exc:
                out.append("refused: " + str(exc).strip().splitlines()[-1])
        return out

    got = cluster.in_client(attempts, timeout=60)
    assert got[0] == "ok", got
    assert got[1].startswith("refused") and "password" in got[1], got  # no trust from another host
    assert got[2].startswith("refused") and "password authentication failed" in got[2], got
    hint = cluster.services.stderr()
    assert "other hosts:" in hint and password not in hint  # the terminal hint masks it


@pytest.fixture(scope="module")
def started(cluster: Cluster) -> Cluster:
    """The three worker hosts' workers, ready."""
    for name in ("w1", "w2", "w3"):
        cluster.start_worker(name)
    for worker in cluster.workers.values():
        worker.wait_ready(timeout=120)
    return cluster


HOOK_SESSIONS = ("hook-", "baseline-", "samehost-")
HOOK_PROMPT = "Any news from Pinecrest Dynamics about the funding round?"
HOOK_P99_TARGET_MS = 150.0  # the hook lane's target with a warm worker (docs/hooks.md, "Speed")
QUIET_FLOOR_MS = 22.0  # 'python -c pass' where that target was measured (docs/hooks.md)


def interpreter_floor_ms(cluster: Cluster) -> float:
    """How long starting and leaving Python takes on the client host right now."""
    began = time.monotonic()
    subprocess.run([*cluster.client.exec_prefix(), sys.executable, "-c", "pass"], check=True)
    return (time.monotonic() - began) * 1000


def percentiles(calls: list[HookCall]) -> tuple[float, float]:
    walls = sorted(c.wall_ms for c in calls)
    return walls[len(walls) // 2], walls[min(len(walls) - 1, int(len(walls) * 0.99))]


def test_a_hook_on_the_client_host_gets_its_pages_through_any_worker(started: Cluster) -> None:
    """No fault: 30 prompts of 30 sessions from the client host, each sent to one of the three
    workers in turn (most reach a worker that does not own the session, which forwards it to the
    owner's advertised URL). Interleaved, as the comparison at the same load: 15 prompts from a
    worker's own host to that worker (no link crossed on the way in), and the interpreter floor."""
    state_dir = started.root / "hook-baseline"
    state_dir.mkdir()
    calls, same_host, floor = [], [], []
    for i in range(30):
        name = ("w1", "w2", "w3")[i % 3]
        url = f"http://{started.net[name].address}:6066"
        calls.append(call_hook(started, url, f"baseline-{i}", HOOK_PROMPT, state_dir))
        if i % 2 == 0:
            same_host.append(call_hook(started, url, f"samehost-{i}", HOOK_PROMPT, state_dir, host=started.net[name]))
        floor.append(interpreter_floor_ms(started))
    p50, p99 = percentiles(calls)
    same_p50, same_p99 = percentiles(same_host)
    floor_median = sorted(floor)[len(floor) // 2]
    # The target was set where starting Python takes ~22 ms; on a busier machine everything the hook
    # does (mostly starting Python) takes proportionally longer, so the bound scales with the floor.
    slowdown = max(1.0, floor_median / QUIET_FLOOR_MS)
    print(f"\nhook from the client host, no fault: median {p50:.0f} ms, p99 {p99:.0f} ms over {len(calls)} calls; "
          f"from a worker's own host: median {same_p50:.0f} ms, p99 {same_p99:.0f} ms over {len(same_host)}; "
          f"'python -c pass' median {floor_median:.0f} ms (x{slowdown:.1f} the quiet machine's); "
          f"load average {os.getloadavg()[0]:.1f}")
    assert [c.problems() for c in calls + same_host if c.problems()] == []
    # every call got its pages, except one the machine's load held past the hook's deadline (then it
    # printed nothing, as it must): its wall time says so
    assert all(c.pages >= 1 or c.wall_ms >= HOOK_DEADLINE_MS for c in calls + same_host), [
        (round(c.wall_ms), c.stdout[:200]) for c in calls + same_host if not c.pages]
    assert sum(c.pages >= 1 for c in calls) >= len(calls) * 0.9, [round(c.wall_ms) for c in calls]
    # Within the target (scaled by the slowdown); or, where other work on the machine stretches the
    # tail past it, crossing hosts is not what costs: the median is no worse than the same hook's on
    # a worker's own host, measured interleaved (tails of 30 and 15 loaded calls are not comparable).
    assert p99 <= HOOK_P99_TARGET_MS * slowdown or p50 <= 1.25 * same_p50 + 10, (
        sorted(round(c.wall_ms) for c in calls), sorted(round(c.wall_ms) for c in same_host))
    # the probes answer on the worker's address from another host too (a load balancer's view)
    assert started.workers["w1"].probe(LIVE_PATH, from_ns=started.client.ns)[0] == 200


# ----------------------------------------------------------------------------- the fault run


@dataclass
class FaultFigures:
    name: str
    seconds: float  # how long the fault lasted
    recovery_s: float  # from the heal until the group is back within the lag bound (and the host ready)
    hook: HookCall | None = None
    host_s: float = 0.0  # from the heal until the hit worker is ready with partitions again

    def render(self) -> str:
        hook = (f"hook {self.hook.wall_ms:.0f} ms, {self.hook.pages} page(s), problems {self.hook.problems()}"
                if self.hook else "no hook")
        return (f"{self.name}: {self.seconds:.1f} s, host ready after {self.host_s:.1f} s, recovered in "
                f"{self.recovery_s:.1f} s; {hook}")


@dataclass
class FaultRun:
    verdict: Verdict
    faults: list[FaultFigures]
    turns: int
    expected_rows: int
    wall_s: float
    hook_rows: Counter[str] = field(default_factory=Counter)  # session -> rows, and "session|slug" -> rows

    def render(self) -> str:
        lines = [f"multi-host run: {self.turns} turns, {self.expected_rows} rows expected, wall {self.wall_s:.1f} s",
                 "  " + self.verdict.figures()]
        lines += ["  " + f.render() for f in self.faults]
        return "\n".join(lines)


@dataclass
class Fault:
    name: str
    apply: Callable[[Cluster], object]
    heal: Callable[[Cluster], object]
    host: str  # the host hit (its worker must be ready with partitions after the heal)


def faults(hold_s: float) -> list[Fault]:
    def broker_port(c: Cluster) -> int:
        return int(c.services.broker.rsplit(":", 1)[1])

    def db_port(c: Cluster) -> int:
        return int(c.services.database_url.rsplit(":", 1)[1].split("/", 1)[0])

    def kill_host(c: Cluster) -> None:
        killed = c.net.kill_all("w3")
        assert killed >= 1
        time.sleep(hold_s / 2)
        c.start_worker("w3")

    return [
        Fault("w1 cut off from the broker", lambda c: c.net.cut("w1", "db", broker_port(c)),
              lambda c: c.net.heal("w1", "db", broker_port(c)), "w1"),
        Fault("w2 cut off from the database", lambda c: c.net.cut("w2", "db", db_port(c)),
              lambda c: c.net.heal("w2", "db", db_port(c)), "w2"),
        Fault("client host cut off", lambda c: c.net.link_down("client"), lambda c: c.net.link_up("client"),
              "client"),
        Fault("200 ms delay + 5 % loss on w3's link", lambda c: c.net.degrade("w3", 200, 5), lambda c: c.net.restore("w3"),
              "w3"),
        Fault("every process of host w3 killed", kill_host, lambda c: None, "w3"),
    ]


def lag_or_none(cluster: Cluster) -> int | None:
    """The group's lag, read from the client host; None while the client cannot reach the broker yet
    (right after its cable is back, a first connection attempt may still fail)."""
    try:
        return cluster.lag()
    except Exception:
        return None


def all_ready(cluster: Cluster) -> bool:
    """``/readyz`` answers 200 on every worker (asked from the client host, as a load balancer would)."""
    return all(worker.probe(READY_PATH, from_ns=cluster.client.ns)[0] == 200 for worker in cluster.workers.values())


def wait_recovered(cluster: Cluster, fault: Fault, ready_before: int, bound: int,
                   timeout: float) -> tuple[float, float]:
    """``(host_s, recovered_s)`` from now (the heal).

    ``host_s``: until the hit worker logged a ready line after the fault (it rejoined the group,
    recovered its table and owns partitions again; for the broker cut, a ready line newer than the
    fault's; 0 for the client host). ``recovered_s``: until moreover "back to normal": ``/readyz``
    is 200 on every worker and the group's lag, read from the client host, is within ``bound``.
    Polled every 0.25 s.
    """
    started = time.monotonic()
    host_s = float("inf")
    host_ok, lag = False, None
    while time.monotonic() - started < timeout:
        worker = cluster.workers.get(fault.host)
        host_ok = worker is None or (worker.ready_count() > (ready_before if fault.name.startswith("w1 cut") else 0)
                                     and bool(worker.owned_partitions()))
        if host_ok and host_s == float("inf"):
            host_s = time.monotonic() - started
        lag = lag_or_none(cluster) if host_ok else None
        if lag is not None and lag <= bound and all_ready(cluster):
            return host_s, time.monotonic() - started
        time.sleep(0.25)
    # Which condition never held: a run that timed out here once said only "recovered in inf s".
    ready: dict[str, object] = {}
    for name, w in cluster.workers.items():
        try:
            ready[name] = w.probe(READY_PATH, from_ns=cluster.client.ns)  # the status and each check's outcome
        except Exception as exc:  # unreachable: say so rather than hide the rest
            ready[name] = repr(exc)
    print(f"  {fault.name}: not back to normal after {timeout:.0f} s: hit host ready {host_ok}, group lag {lag} "
          f"(bound {bound}; None: not read), /readyz {ready}", flush=True)
    return host_s, float("inf")


def run_faults(cluster: Cluster, brain: BrainIndex, *, turns: int, rate: float, hold_s: float, rounds: int,
               seed: int) -> FaultRun:
    began = time.monotonic()
    workload = build_workload(turns, seed=seed, concurrent=200)
    for name in ("w1", "w2", "w3"):
        if name not in cluster.workers:
            cluster.start_worker(name)
    for worker in cluster.workers.values():
        worker.wait_ready(timeout=120)
    producer = ClientProducer(cluster.client.ns, cluster.settings, workload, rate, seed)
    producer.start()
    bound = int(rate * 6)  # ~6 s of input behind: commits come every few seconds
    state_dir = cluster.root / "hook-state"
    state_dir.mkdir(exist_ok=True)
    figures: list[FaultFigures] = []
    try:
        time.sleep(3)
        for round_no in range(rounds):
            for fault in faults(hold_s):
                assert producer.is_alive(), "the workload ran out before the faults did: raise turns"
                hit_worker = cluster.workers.get(fault.host)
                ready_before = hit_worker.ready_count() if hit_worker is not None else 0
                owned_before = hit_worker.owned_partitions() if hit_worker is not None else []
                others_lines = {n: len(w.ready_partitions()) for n, w in cluster.workers.items() if n != fault.host}
                hit = time.monotonic()
                fault.apply(cluster)
                time.sleep(hold_s / 2)
                # the hook asks the host that is hit (the client's own fault: any worker)
                via = cluster.net[fault.host if fault.host in cluster.workers else "w1"].address
                hook = call_hook(cluster, f"http://{via}:6066", f"hook-{round_no}-{len(figures)}",
                                 HOOK_PROMPT, state_dir)
                time.sleep(max(0.0, hold_s - (time.monotonic() - hit)))
                fault.heal(cluster)
                lasted = time.monotonic() - hit
                taken = sorted({p for n, count in others_lines.items()
                                for line in cluster.workers[n].ready_partitions()[count:] for p in line} & set(owned_before))
                host_s, recovery = wait_recovered(cluster, fault, ready_before, bound, timeout=120)
                if fault.name.startswith("w1 cut off from the broker"):
                    # its partitions moved to the others during the cut (and it has some again: wait_recovered)
                    assert taken, (owned_before, others_lines)
                figures.append(FaultFigures(fault.name + (f" (round {round_no + 1})" if rounds > 1 else ""),
                                            lasted, recovery, hook, host_s))
                print(figures[-1].render(), flush=True)
        producer.stopping.set()
        producer.finish()
    finally:
        producer.stopping.set()
    sent = Workload(workload.turns[:producer.sent], workload.meta)
    expected = expected_events(sent, brain)
    cluster.in_client(lambda: wait_until_quiet(cluster.settings, len(expected), timeout=240), timeout=300)
    for name, worker in cluster.workers.items():
        assert worker.proc is not None and worker.proc.poll() is None, (
            f"the worker on {name} exited by itself:\n" + worker.log()[-3000:])
    verdict = cluster.in_client(lambda: verify(cluster.settings, expected, skip_sessions=HOOK_SESSIONS),
                                timeout=300)
    hook_rows = cluster.in_client(lambda: hook_session_rows(cluster.settings.database_url), timeout=60)
    return FaultRun(verdict, figures, producer.sent, len(expected), time.monotonic() - began, hook_rows)


def hook_session_rows(database_url: str) -> Counter[str]:
    """Rows per hook session (their pages count as volunteered once the hook printed them)."""
    with psycopg.connect(database_url, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute("SELECT session_id, slug FROM context_volunteer_events WHERE session_id LIKE 'hook-%' "
                            "OR session_id LIKE 'baseline-%'").fetchall()
    return Counter(str(r[0]) for r in rows) + Counter(f"{r[0]}|{r[1]}" for r in rows)


RECOVERY_TARGET_S = SESSION_TIMEOUT_S + 10  # the target: back to normal within this after a heal


def assert_run(run: FaultRun) -> None:
    print("\n" + run.render())
    assert run.expected_rows > 0
    assert run.verdict.exact, run.verdict.problems()
    assert run.verdict.rows_found == run.verdict.rows_expected == run.expected_rows
    for fault in run.faults:
        assert fault.hook is not None and fault.hook.problems() == [], fault.render()
        # what the hook printed during the fault is in the table exactly once, and nothing else
        session = fault.hook.session_id
        assert run.hook_rows[session] == fault.hook.pages, (fault.render(), run.hook_rows[session])
        assert all(n == 1 for key, n in run.hook_rows.items() if key.startswith(session + "|")), run.hook_rows
        assert fault.recovery_s <= RECOVERY_TARGET_S, fault.render()


def test_faults_across_hosts_lose_and_duplicate_nothing(started: Cluster, conformance_brain: BrainIndex) -> None:
    cluster = started
    run = run_faults(cluster, conformance_brain, turns=9000, rate=60, hold_s=8, rounds=1, seed=1616)
    assert_run(run)
    # the partition moved w1's partitions away and gave it some back after the heal
    w1 = cluster.workers["w1"]
    assert w1.ready_count() >= 2 and w1.owned_partitions()
    for name in ("w1", "w2", "w3"):
        assert cluster.workers[name].probe(LIVE_PATH)[0] == 200
    states = {name: cluster.workers[name].probe(READY_PATH) for name in ("w1", "w2", "w3")}
    assert sum(body.get("partitions", 0) for _, body in states.values()) == cluster.settings.topic_partitions, states
    assert all(status == 200 for status, _ in states.values()), states


@pytest.mark.long
def test_long_faults_across_hosts(cluster: Cluster, conformance_brain: BrainIndex) -> None:
    with contextlib.suppress(Exception):
        for worker in list(cluster.workers.values()):
            worker.stop()
    cluster.settings = settings_for(cluster.services.broker, new_names(), database_url=cluster.services.database_url,
                                    topic_partitions=6)
    settings = cluster.settings
    cluster.workers.clear()
    cluster.in_client(lambda: run_sync(ensure_topics(settings)), timeout=120)
    result = run_faults(cluster, conformance_brain, turns=40_000, rate=80, hold_s=15, rounds=2, seed=1617)
    assert_run(result)
