"""redlease: distributed locks on Redis and Valkey, from threads and asyncio.

The same library as the Rust crate (this package is built from it), so
the guarantees are the same: a lease is valid until ``remaining`` runs
out unless renewed, ``lost`` is set as soon as it can no longer be
trusted, waiters are served in turn, and every call stopped midway
(Ctrl-C, a cancelled task) leaves nothing behind on the servers.

>>> import redlease
>>> locker = redlease.Locker(["redis://127.0.0.1:6379"], ttl=10)  # doctest: +SKIP
>>> with locker.lock("nightly-report", wait=5) as lease:          # doctest: +SKIP
...     build_report(lease.fencing_token)
"""

import atexit

from . import _logging, _redlease
from ._durability import Durability
from ._errors import (
    ClosedError,
    ForkedError,
    InvalidInputError,
    LostError,
    NoQuorumError,
    NotHeldError,
    PermitsDifferError,
    RedleaseError,
    SameServerError,
    TakenError,
    ValidityExhaustedError,
    WaitTimeoutError,
)
from ._election import Election, Leadership, Observe, Watch
from ._locker import Lease, Locker, Request, Semaphore

# No thread of the library calls into Python once the interpreter exits.
atexit.register(_redlease.shutdown)
# The library's log events on the `redlease` loggers (see _logging).
_logging.refresh()
refresh_logging = _logging.refresh

__all__ = [
    "ClosedError",
    "Durability",
    "Election",
    "ForkedError",
    "InvalidInputError",
    "Leadership",
    "Lease",
    "Locker",
    "LostError",
    "NoQuorumError",
    "NotHeldError",
    "Observe",
    "PermitsDifferError",
    "RedleaseError",
    "Request",
    "SameServerError",
    "Semaphore",
    "TakenError",
    "ValidityExhaustedError",
    "WaitTimeoutError",
    "Watch",
    "refresh_logging",
]
