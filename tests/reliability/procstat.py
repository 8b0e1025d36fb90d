"""CPU time and resident memory of a process, from /proc (Linux), for the spin and memory checks."""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may contain spaces
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _TICKS


def rss_bytes(pid: int) -> int:
    """Current resident set size."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def peak_rss_bytes(pid: int) -> int:
    """Highest resident set size the process has had (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for process {pid}")
