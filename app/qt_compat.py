"""Works around a reference-count bug of the PySide6 6.12.0 wheels on Python
3.11: void Qt methods return None, and SignalInstance.emit() returns True,
without taking a reference (harmless on 3.12+, where these singletons are
immortal). On 3.11 every such call lowers the count by one; after a few
minutes of streaming, or at the garbage collection on exit, the interpreter
aborts with "none_dealloc" / "bool_dealloc".

Fix: where the leak is measured, give None, True and False a reference
count so large that no process can spend it, which is what 3.12 does.
"""
from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal

_PROBES = 8
_HEADROOM = 1 << 40          # 1e12 leaked calls before trouble: never
_applied = False


class _Probe(QObject):
    fired = Signal()


def measure_leaks() -> dict[str, int]:
    """References lost per call, for None (void method) and True (emit)."""
    probe = _Probe()
    none0, true0 = sys.getrefcount(None), sys.getrefcount(True)
    for _ in range(_PROBES):
        probe.setObjectName("probe")
        probe.fired.emit()
    return {"None": (none0 - sys.getrefcount(None)) // _PROBES,
            "True": (true0 - sys.getrefcount(True)) // _PROBES}


def immortalize_singletons() -> bool:
    """True if the bug was found and the headroom added (once per process)."""
    global _applied
    if _applied or sys.version_info >= (3, 12):
        return _applied
    if not any(n > 0 for n in measure_leaks().values()):
        return False
    for obj in (None, True, False):
        ctypes.c_ssize_t.from_address(id(obj)).value += _HEADROOM   # ob_refcnt
    _applied = True
    return True
