"""The exceptions redlease raises: one class per kind of the library's
``Error``, each a ``RedleaseError`` (and, where one fits, a built-in
exception too: a bad argument is a ``ValueError``, a wait that ran out a
``TimeoutError``). The message is the library's, with the per-node
detail it carries."""

from ._redlease import RawError


class RedleaseError(Exception):
    """Any error of redlease. ``kind`` names it as the library does."""

    kind = "other"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(RedleaseError, ValueError):
    """Bad input, refused before anything was sent: nothing was written."""

    kind = "invalid_input"


class TakenError(RedleaseError):
    """Another owner holds it (the message says who, and on which nodes)."""

    kind = "taken"


class WaitTimeoutError(RedleaseError, TimeoutError):
    """The wait ran out before the lock could be had."""

    kind = "wait_timeout"


class NoQuorumError(RedleaseError, ConnectionError):
    """Too few nodes answered (the message names each failure)."""

    kind = "no_quorum"


class ValidityExhaustedError(RedleaseError):
    """A quorum said yes too late to leave any validity."""

    kind = "validity_exhausted"


class NotHeldError(RedleaseError):
    """The lease is no longer held (expired, released, taken over)."""

    kind = "not_held"


class LostError(RedleaseError):
    """The lease was lost while its work ran."""

    kind = "lost"


class ClosedError(RedleaseError):
    """The Locker was closed."""

    kind = "closed"


class SameServerError(RedleaseError):
    """Two node URLs name one server: its vote would count twice."""

    kind = "same_server"


class PermitsDifferError(RedleaseError, ValueError):
    """The semaphore is held with another number of permits."""

    kind = "permits_differ"


class ForkedError(RedleaseError, RuntimeError):
    """Used in a child process after fork(): make the Locker in the child."""

    kind = "forked"


_BY_KIND = {
    cls.kind: cls
    for cls in (
        InvalidInputError,
        TakenError,
        WaitTimeoutError,
        NoQuorumError,
        ValidityExhaustedError,
        NotHeldError,
        LostError,
        ClosedError,
        SameServerError,
        PermitsDifferError,
        ForkedError,
    )
}


def translate(error: RawError) -> RedleaseError:
    """The package's exception for the library's ``RawError(kind, message)``."""
    kind, message = error.args
    return _BY_KIND.get(kind, RedleaseError)(message)
