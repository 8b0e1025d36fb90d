"""Several "hosts" on one machine: Linux network namespaces joined by a bridge, made by the test.

Why: the multi-host faults (a worker cut off from the broker, a slow lossy link, a whole host
killed) need separate network stacks with their own addresses, and this machine kind has no Docker.
Root can make them with iproute2 alone:

- a *switch* namespace holding a bridge ``br0``; every host namespace gets a veth pair, ``eth0``
  on its side, ``p-<host>`` on the bridge;
- addresses from ``198.18.0.0/24`` (the benchmarking range of RFC 2544), which exist only inside
  these namespaces: no address is ever added to the root namespace and no namespace has a route
  beyond its /24, so nothing here can reach (or be reached from) anything else; loopback inside each
  namespace stays its own;
- faults are rules inside a host's namespace: ``iptables`` DROP rules for a partition, the veth
  link down for a host cut off, ``tc netem`` (or, on kernels built without netem, an NFQUEUE
  delayer, :mod:`tests.reliability.nfqueue`) plus random drops for a slow lossy link.

Every namespace of one :class:`Network` is named ``vsn-<pid>-<run>-<host>``: runs never clash,
:meth:`Network.remove` deletes them (called by the fixture finalizer and by ``atexit``), and
:func:`sweep_stale` deletes those whose creating process is gone (a run that was SIGKILLed).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

PREFIX = "vsn-"
SUBNET = "198.18.0"
NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
T = TypeVar("T")


class NetnsUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no CAP_NET_ADMIN, no iproute2); the text says why."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def unavailable_reason() -> str | None:
    """None when this process can make namespaces, else why not (the tests skip with it)."""
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); run as root, as CI does"
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables)"
    probe = f"{PREFIX}{os.getpid()}-probe{uuid.uuid4().hex[:4]}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def sweep_stale() -> list[str]:
    """Delete namespaces of this project whose creating process no longer exists; returns their names."""
    removed = []
    for name in _netns_names():
        parts = name[len(PREFIX):].split("-", 1)
        if not parts[0].isdigit():
            continue
        try:
            os.kill(int(parts[0]), 0)
            continue  # its run is still alive (maybe a concurrent one): leave it
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        _kill_pids(name)
        _ip("netns", "del", name, check=False)
        removed.append(name)
    return removed


def _netns_names() -> list[str]:
    result = _ip("netns", "list", check=False)
    names = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(PREFIX)]


def _pids(ns: str) -> list[int]:
    result = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in result.stdout.split() if p.isdigit()]


def _kill_pids(ns: str) -> int:
    pids = _pids(ns)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def _netem_available(ns: str) -> bool:
    probe = _run_in(ns, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"], check=False)
    if probe.returncode != 0:
        return False
    _run_in(ns, ["tc", "qdisc", "del", "dev", "lo", "root"], check=False)
    return True


def _run_in(ns: str, cmd: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise RuntimeError(f"[{ns}] {' '.join(cmd)}: {result.stderr.strip()}")
    return result


def enter(ns: str) -> None:
    """Move the *calling thread* into namespace ``ns`` (sockets it opens from then on live there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / ns, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({ns}): {os.strerror(err)}")
    finally:
        os.close(fd)


def call_in(ns: str, func: Callable[[], T], timeout: float = 600) -> T:
    """Run ``func`` in a fresh thread that has entered ``ns``; its result or its exception."""
    box: dict[str, object] = {}

    def body() -> None:
        try:
            enter(ns)
            box["value"] = func()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=body, name=f"in-{ns}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"call in {ns} did not finish within {timeout:.0f} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


@dataclass
class Host:
    name: str  # short: "db", "w1", "client"
    ns: str
    address: str
    port_name: str  # its veth end on the bridge, in the switch namespace

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns]


@dataclass
class Network:
    """A switch and hosts; ``cut``/``heal``, ``link_down``/``link_up``, ``degrade``/``restore``, ``kill_all``."""

    hosts: dict[str, Host] = field(default_factory=dict)
    run: str = field(default_factory=lambda: f"{os.getpid()}-{uuid.uuid4().hex[:4]}")
    switch: str = ""
    netem: bool | None = None
    _delayers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _removed: bool = False

    @classmethod
    def create(cls, names: list[str]) -> Network:
        reason = unavailable_reason()
        if reason is not None:
            raise NetnsUnavailable(reason)
        net = cls()
        atexit.register(net.remove)
        try:
            net.switch = f"{PREFIX}{net.run}-sw"
            _ip("netns", "add", net.switch)
            _run_in(net.switch, ["ip", "link", "add", "br0", "type", "bridge"])
            _run_in(net.switch, ["ip", "link", "set", "br0", "up"])
            for index, name in enumerate(names, start=2):
                net._add_host(name, f"{SUBNET}.{index}")
        except BaseException:
            net.remove()
            raise
        return net

    def _add_host(self, name: str, address: str) -> None:
        ns = f"{PREFIX}{self.run}-{name}"
        port = f"p-{name}"[:15]
        _ip("netns", "add", ns)
        # both ends are created directly inside their namespaces: nothing appears in the root one
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
        _run_in(self.switch, ["ip", "link", "set", port, "master", "br0"])
        _run_in(self.switch, ["ip", "link", "set", port, "up"])
        _run_in(ns, ["ip", "link", "set", "lo", "up"])
        _run_in(ns, ["ip", "addr", "add", f"{address}/24", "dev", "eth0"])
        _run_in(ns, ["ip", "link", "set", "eth0", "up"])
        self.hosts[name] = Host(name, ns, address, port)

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    # ------------------------------------------------------------------ faults

    def cut(self, host: str, peer: str, port: int | None = None) -> None:
        """Drop every packet between ``host`` and ``peer`` (only TCP ``port`` on the peer, if given),
        inside ``host``'s namespace, both directions. Connections stay open and time out, as on a
        real partition (no RST, no ICMP)."""
        for rule in self._cut_rules(peer, port):
            _run_in(self.hosts[host].ns, ["iptables", "-w", "-I", *rule])

    def heal(self, host: str, peer: str, port: int | None = None) -> None:
        for rule in self._cut_rules(peer, port):
            _run_in(self.hosts[host].ns, ["iptables", "-w", "-D", *rule], check=False)

    def _cut_rules(self, peer: str, port: int | None) -> list[list[str]]:
        address = self.hosts[peer].address
        if port is None:
            return [["OUTPUT", "-d", address, "-j", "DROP"], ["INPUT", "-s", address, "-j", "DROP"]]
        return [["OUTPUT", "-d", address, "-p", "tcp", "--dport", str(port), "-j", "DROP"],
                ["INPUT", "-s", address, "-p", "tcp", "--sport", str(port), "-j", "DROP"]]

    def link_down(self, host: str) -> None:
        """Unplug the host's cable (its bridge port goes down): it reaches no one, no one reaches it."""
        _run_in(self.switch, ["ip", "link", "set", self.hosts[host].port_name, "down"])

    def link_up(self, host: str) -> None:
        _run_in(self.switch, ["ip", "link", "set", self.hosts[host].port_name, "up"])

    def degrade(self, host: str, delay_ms: int, loss_percent: float) -> str:
        """Delay every packet leaving ``host``'s eth0 by ``delay_ms`` and drop ``loss_percent`` % of
        them, in and out; returns how ("netem" or "nfqueue")."""
        ns = self.hosts[host].ns
        if self.netem is None:
            self.netem = _netem_available(ns)
        if self.netem:
            _run_in(ns, ["tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", f"{delay_ms}ms",
                         "loss", f"{loss_percent}%"])
            _run_in(ns, ["iptables", "-w", "-I", "INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random",
                         "--probability", str(loss_percent / 100), "-j", "DROP"])
            return "netem"
        queue = 7
        delayer = subprocess.Popen(
            [*self.hosts[host].exec_prefix(), sys.executable, "-m", "tests.reliability.nfqueue", str(queue),
             str(delay_ms)],
            cwd=Path(__file__).resolve().parents[2], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT)
        self._delayers[host] = delayer
        assert delayer.stdout is not None
        line = delayer.stdout.readline()
        if not line.startswith(b"bound"):
            raise RuntimeError(f"the NFQUEUE delayer did not start: {line!r}")
        for rule in self._degrade_rules(queue, loss_percent):
            _run_in(ns, ["iptables", "-w", "-I", *rule])
        return "nfqueue"

    @staticmethod
    def _degrade_rules(queue: int, loss_percent: float) -> list[list[str]]:
        drop = ["-m", "statistic", "--mode", "random", "--probability", str(loss_percent / 100), "-j", "DROP"]
        delay = ["-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"]
        # inserted in this order with -I: the drop rule ends up first in each chain
        return [["OUTPUT", "-o", "eth0", *delay], ["OUTPUT", "-o", "eth0", *drop],
                ["INPUT", "-i", "eth0", *drop]]

    def restore(self, host: str) -> None:
        ns = self.hosts[host].ns
        if self.netem:
            _run_in(ns, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        _run_in(ns, ["iptables", "-w", "-F", "INPUT"], check=False)
        _run_in(ns, ["iptables", "-w", "-F", "OUTPUT"], check=False)
        delayer = self._delayers.pop(host, None)
        if delayer is not None:
            delayer.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                delayer.wait(5)
            if delayer.poll() is None:
                delayer.kill()
                delayer.wait()

    def pids(self, host: str) -> list[int]:
        return _pids(self.hosts[host].ns)

    def kill_all(self, host: str) -> int:
        """SIGKILL every process in the host's namespace at once (the host lost power); how many."""
        return _kill_pids(self.hosts[host].ns)

    # ------------------------------------------------------------------ teardown

    def remove(self) -> None:
        """Kill what still runs inside and delete every namespace of this network. Idempotent."""
        if self._removed:
            return
        self._removed = True
        for host in list(self._delayers):
            with contextlib.suppress(Exception):
                self.restore(host)
        names = [h.ns for h in self.hosts.values()] + ([self.switch] if self.switch else [])
        for ns in names:
            _kill_pids(ns)
        deadline = time.monotonic() + 5
        while any(_pids(ns) for ns in names) and time.monotonic() < deadline:
            time.sleep(0.05)
        for ns in names:
            _ip("netns", "del", ns, check=False)

    def exists(self) -> list[str]:
        """Namespaces of this network that still exist (empty after :meth:`remove`)."""
        mine = f"{PREFIX}{self.run}-"
        return [n for n in _netns_names() if n.startswith(mine)]


@contextlib.contextmanager
def network(names: list[str]) -> Iterator[Network]:
    net = Network.create(names)
    try:
        yield net
    finally:
        net.remove()
