"""A fixed packet delay without ``tc netem``: hold each queued packet for N ms, then accept it.

Why: some kernels (this machine kind's among them) are built without ``sch_netem``, yet the
multi-host faults need "200 ms on one worker's link". ``iptables -j NFQUEUE`` hands each packet's
metadata to a userspace listener over netlink (``nfnetlink_queue``, compiled in); this listener
issues the ACCEPT verdict ``delay`` ms after the packet arrived, in arrival order, so the link gets
a constant extra latency exactly like netem's ``delay``. Loss is a separate ``-m statistic`` DROP
rule. Plain sockets and ``struct`` only (no libnetfilter_queue).

Run inside the host's namespace: ``python -m tests.reliability.nfqueue QUEUE DELAY_MS``; it prints
``bound`` once it listens and runs until SIGTERM. The iptables rule uses ``--queue-bypass``, so if
the listener dies packets flow undelayed instead of being dropped.
"""

from __future__ import annotations

import collections
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_VERDICT = 1
NFQNL_MSG_CONFIG = 2
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_ACCEPT = 1
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
AF_INET = 2
_NLMSGHDR = struct.Struct("=IHHII")
_NFGENMSG = struct.Struct("=BBH")


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _message(kind: int, queue: int, attrs: bytes, seq: int) -> bytes:
    body = _NFGENMSG.pack(AF_INET, 0, socket.htons(queue)) + attrs
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, NLM_F_REQUEST, seq, 0) + body


def _packet_ids(data: bytes) -> list[int]:
    """Packet ids of the NFQNL_MSG_PACKET messages in one netlink datagram."""
    ids = []
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _, _, _ = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size:
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            pos = offset + _NLMSGHDR.size + _NFGENMSG.size
            end = offset + length
            while pos + 4 <= end:
                alen, akind = struct.unpack_from("=HH", data, pos)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from(">I", data, pos + 4)[0])
                pos += (alen + 3) & ~3
        offset += (length + 3) & ~3
    return ids


def serve(queue: int, delay_s: float) -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.bind((0, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.send(_message(NFQNL_MSG_CONFIG, queue, _attr(NFQA_CFG_CMD, struct.pack(">BBH", NFQNL_CFG_CMD_BIND, 0, 0)), 1))
    sock.send(_message(NFQNL_MSG_CONFIG, queue, _attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META))
                       + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", 65536)), 2))
    print("bound", flush=True)
    held: collections.deque[tuple[float, int]] = collections.deque()
    seq = 3
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    while not stop:
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, packet_id = held.popleft()
            verdict = _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet_id))
            sock.send(_message(NFQNL_MSG_VERDICT, queue, verdict, seq))
            seq += 1
        wait = max(0.0, held[0][0] - time.monotonic()) if held else 0.5
        try:
            ready, _, _ = select.select([sock], [], [], wait)
        except InterruptedError:
            continue
        if ready:
            data = sock.recv(1 << 16)
            arrived = time.monotonic()
            held.extend((arrived + delay_s, packet_id) for packet_id in _packet_ids(data))
    for _, packet_id in held:  # let what is held go before leaving
        sock.send(_message(NFQNL_MSG_VERDICT, queue, _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet_id)),
                           seq))
        seq += 1


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]) / 1000)
