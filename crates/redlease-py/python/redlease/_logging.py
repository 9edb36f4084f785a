"""The library's log events, on Python's ``logging``.

The library's events (a lease lost, renewals to a node failing, a lock
force-released, ...) go to loggers under ``redlease`` named after where
they happen (``redlease.coord.renew``). Only events at or above the
``redlease`` logger's effective level are passed from the library: that
level is read when the package is imported and each time a ``Locker`` is
made, so configure logging before making one (or call ``refresh()``).
"""

from __future__ import annotations

import logging

from . import _redlease

_root = logging.getLogger("redlease")


def _emit(level: int, name: str, line: str) -> None:
    # On the library's logging thread, with the GIL.
    logging.getLogger(name).log(level, line)


def refresh() -> None:
    """Reads the ``redlease`` logger's effective level again."""
    _redlease.set_logger(_emit, _root.getEffectiveLevel())
