"""What a daemon process costs, read from Linux's ``/proc`` (benchmarks, attack scripts).

Linux only; the pid is a child process of the caller (a daemon it started).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

__all__ = ["cpu_seconds", "memory_kib", "reset_peak_memory"]


def memory_kib(pid: int) -> dict[str, int]:
    """``{"VmRSS": …, "VmHWM": …}``: resident and peak resident memory of ``pid`` in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1])
    return out


def reset_peak_memory(pid: int) -> None:
    """Reset VmHWM to the current RSS (``clear_refs`` 5), so that a peak read
    later is the peak since now; silently does nothing where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of ``pid``, or of this process."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
