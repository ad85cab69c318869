"""Keep freed host memory in the process between steps (CPU ranks).

Every training step frees and re-allocates the same activations. With glibc's default settings,
large freed blocks go back to the operating system — blocks above the (dynamic, at most 32 MiB)
mmap threshold are unmapped on free, and the heap top is trimmed once enough of it is free — so
the next step takes a page fault on every page of its activations again. How much a program suffers
depends on its heap layout, which is why two engines running the same convolutions differed by it.
``make bench-hostmem`` (reports/engine/hostmem.md) measures faults per step and peak memory with
each mode; ``make bench-engine`` (reports/engine/engine.md) the step times.

``HOST_MEMORY_MODES``:

- ``retain``: tell glibc's malloc (``mallopt``) never to trim the heap and never to serve requests
  with ``mmap``, so freed blocks stay mapped and are reused by the next step — the host-side
  counterpart of CUDA's caching allocator. Resident memory stays at its peak rather than dropping
  between steps, and heap fragmentation can raise that peak — little on the engine benchmark's model,
  most with few, very large blocks (40 MiB activations at M = 1: see reports/engine/hostmem.md).
  Process-wide and permanent for the process; applied once. Where the C library is not glibc (macOS,
  musl) it does nothing and says so.
- ``system``: leave the C library's allocator alone.

This module changes allocator settings only; it allocates nothing itself.
"""

from __future__ import annotations

import ctypes
import platform

from .errors import ArgumentError

__all__ = ["HOST_MEMORY_MODES", "apply_host_memory", "check_host_memory"]

HOST_MEMORY_MODES = ("retain", "system")
DEFAULT_HOST_MEMORY = "retain"

# glibc <malloc.h>; documented in mallopt(3).
_M_TRIM_THRESHOLD = -1  # -1 as the value: never trim the heap top
_M_TOP_PAD = -2
_M_MMAP_MAX = -4  # 0 as the value: never use mmap for an allocation
_TOP_PAD_BYTES = 64 << 20  # grow the heap in larger steps: fewer brk calls while warming up

_applied: str | None = None


def check_host_memory(mode: str) -> None:
    if mode not in HOST_MEMORY_MODES:
        raise ArgumentError(
            "host_memory", mode, f"is invalid; allowed: {', '.join(HOST_MEMORY_MODES)}"
        )


def apply_host_memory(mode: str) -> str:
    """Apply ``mode`` to this process; returns what is in effect: ``retain`` or ``system (<why>)``.

    ``retain`` is applied at most once per process; ``system`` never undoes an earlier ``retain``.
    """
    global _applied
    check_host_memory(mode)
    if _applied == "retain":
        return _applied
    if mode == "system":
        return "system"
    libc_name = platform.libc_ver()[0]
    if libc_name != "glibc":
        return f"system (C library {libc_name or 'unknown'} is not glibc)"
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError) as err:  # pragma: no cover - glibc always has mallopt
        return f"system (no mallopt: {err})"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(_M_TRIM_THRESHOLD, -1) == 1 and mallopt(_M_MMAP_MAX, 0) == 1
    mallopt(_M_TOP_PAD, _TOP_PAD_BYTES)
    if not ok:  # pragma: no cover - documented values, accepted by every glibc since 2.x
        return "system (mallopt refused the settings)"
    _applied = "retain"
    return _applied
