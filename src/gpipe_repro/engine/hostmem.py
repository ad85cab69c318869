"""Keep freed host memory in the process between steps, and the objects alive at set-up out of Python's
collector (CPU ranks).

Every training step frees and re-allocates the same activations. With glibc's default settings,
large freed blocks go back to the operating system — blocks above the (dynamic) mmap threshold are
unmapped on free, and the heap top is trimmed once enough of it is free (``mallopt(3)``) — so the
next step takes a page fault on every page of its activations again. How much a program suffers
depends on its heap layout, which is why two engines running the same convolutions differed by it.
``make bench-hostmem`` (reports/engine/hostmem.md) measures faults per step and peak memory with
each mode; ``make bench-engine`` (reports/engine/engine.md) the step times.

``HOST_MEMORY_MODES``:

- ``retain``: tell glibc's malloc (``mallopt``) never to trim the heap and never to serve requests
  with ``mmap``, so freed blocks stay mapped and are reused by the next step — the host-side
  counterpart of CUDA's caching allocator. Resident memory stays at its peak rather than dropping
  between steps, and heap fragmentation can raise that peak, most with few, very large blocks
  (reports/engine/hostmem.md has both cases). Process-wide and permanent for the process; applied
  once. Where the C library is not glibc (macOS, musl) it does nothing and says so.

  It also moves every Python object alive at that moment (torch's own modules and whatever the process
  built before) into the collector's permanent generation (``gc.collect()``, then ``gc.freeze()``):
  a step builds and drops many objects, so Python's cyclic collector runs full collections during
  steps, and unfrozen each scans all of those long-lived objects, a pause no layer profile sees.
  ``python bench/collector.py`` measures it (the full collections during the engine's steps, and the
  forward per micro-batch with the objects frozen and unfrozen, in a process that profiles and
  trains by turns and in one that only trains). Objects made later are collected as usual; only
  cycles among the frozen ones are never freed (once per process, so nothing made after is kept by
  it).
- ``system``: leave the C library's allocator and Python's collector alone.

This module changes allocator and collector settings only; it allocates nothing itself.
"""

from __future__ import annotations

import ctypes
import gc
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
_frozen = False  # the objects alive at the first ``retain`` are out of the collector's reach


def check_host_memory(mode: str) -> None:
    if mode not in HOST_MEMORY_MODES:
        raise ArgumentError(
            "host_memory", mode, f"is invalid; allowed: {', '.join(HOST_MEMORY_MODES)}"
        )


def apply_host_memory(mode: str) -> str:
    """Apply ``mode`` to this process; returns what is in effect: ``retain`` or ``system (<why>)``.

    ``retain`` is applied at most once per process; ``system`` never undoes an earlier ``retain``.
    """
    global _applied, _frozen
    check_host_memory(mode)
    if _applied == "retain":
        return _applied
    if mode == "system":
        return "system"
    if not _frozen:
        gc.collect()  # what is garbage now must not become permanent
        gc.freeze()
        _frozen = True
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
