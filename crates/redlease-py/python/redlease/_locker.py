"""Locker, the lock requests and Lease: the Python face of the library.

Every call exists twice: plain, for threads (it blocks with the GIL
released, and Ctrl-C stops it at once), and ``async``, for asyncio (a
cancelled task stops it at once). Either way, a call stopped midway
leaves nothing behind on the servers: a wait leaves its queue, an attempt
in flight is undone, and a lease granted but not handed over is given
back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from . import _logging, _redlease
from ._durability import Durability
from ._errors import InvalidInputError, NotHeldError, translate

log = logging.getLogger("redlease")

# How long a thread waits with the GIL released between two looks for a
# signal (Ctrl-C) or an exception raised into it.
_SLICE = 0.05


def _outcome(pending: _redlease.Pending) -> Any:
    try:
        return pending.result()
    except _redlease.RawError as e:
        raise translate(e) from None


def _call(start: Callable[[], _redlease.Pending]) -> _redlease.Pending:
    try:
        return start()
    except _redlease.RawError as e:
        raise translate(e) from None
    except OverflowError as e:  # a count below 0 or too large
        raise InvalidInputError(str(e)) from None


def _block(start: Callable[[], _redlease.Pending]) -> Any:
    """Runs a call to its end on this thread."""
    pending = _call(start)
    try:
        while not pending.wait(_SLICE):
            pass
    except BaseException:
        # KeyboardInterrupt, or any exception raised into this thread.
        pending.cancel()
        raise
    return _outcome(pending)


async def _await(start: Callable[[], _redlease.Pending]) -> Any:
    """Runs a call to its end without blocking the event loop."""
    pending = _call(start)
    loop = asyncio.get_running_loop()
    ended = loop.create_future()

    def settle() -> None:
        if not ended.done():
            ended.set_result(None)

    def done() -> None:  # on the library's thread, with the GIL
        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits any more

    pending.on_done(done)
    try:
        await ended
    except BaseException:
        # Cancelled (or the loop is going away): stop the call.
        pending.cancel()
        raise
    return _outcome(pending)


class _LostSignal:
    """How a lease (or a lead) tells it can no longer be trusted: ``lost``,
    a ``threading.Event`` set after every ``on_lost`` callback ran, with
    the reason in ``_reason``. ``_watch(inner)`` asks the library to tell."""

    def _watch(self, inner: Any, what: str) -> None:
        self._what = what
        self._reason: Optional[str] = None
        self._callbacks: list[Callable[[str], None]] = []
        self._lost_lock = threading.Lock()
        #: Set once it can no longer be trusted (after the callbacks ran).
        self.lost = threading.Event()
        inner.on_lost(self._on_lost)

    def _on_lost(self, reason: str) -> None:
        with self._lost_lock:
            self._reason = reason
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:  # a callback's error is the caller's to see
                log.exception("an on_lost callback of %s failed", self._what)
        # Last: whoever waits on the event finds every callback done.
        self.lost.set()

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Calls ``callback(reason)`` (on another thread) once it is lost,
        before ``lost`` is set; at once if it is. Given back (released,
        resigned, exported), it is never told lost."""
        with self._lost_lock:
            reason = self._reason
            if reason is None:
                self._callbacks.append(callback)
        if reason is not None:
            callback(reason)

    async def wait_lost(self) -> str:
        """Returns (with the reason) once it is lost."""
        loop = asyncio.get_running_loop()
        told = loop.create_future()

        def tell(reason: str) -> None:
            try:
                loop.call_soon_threadsafe(lambda: told.done() or told.set_result(reason))
            except RuntimeError:
                pass

        self.on_lost(tell)
        return await told


class Lease(_LostSignal):
    """A held lock (or read hold, or permits). Valid for ``remaining``
    seconds unless renewed (``keep_alive=True``) or extended; ``lost`` is
    set, and each ``on_lost`` callback called, as soon as it can no
    longer be trusted. Give it back with ``release()``; a ``with`` block
    gives it back when the block ends. A lease dropped unreleased is given
    back in the background."""

    def __init__(self, inner: _redlease.Lease) -> None:
        self._inner = inner
        self._watch(inner, f"lease on {inner.resource!r}")

    @property
    def resource(self) -> str:
        """The name it holds (the first, for several)."""
        return self._inner.resource

    @property
    def fencing_token(self) -> Optional[int]:
        """Higher for every holder of the name (``Locker(fencing=True)``)."""
        return self._inner.fencing_token

    @property
    def resources(self) -> list[str]:
        """Every name it holds, in the order asked."""
        return self._inner.resources

    @property
    def mode(self) -> str:
        """``"exclusive"``, ``"shared"`` (a reader's) or ``"permit"``."""
        return self._inner.mode

    @property
    def replicas_acknowledged(self) -> Optional[int]:
        """How many replicas acknowledged the acquire (with ``durability``)."""
        return self._inner.replicas_acknowledged

    @property
    def remaining(self) -> float:
        """Seconds of validity left."""
        return self._inner.remaining

    @property
    def lost_reason(self) -> Optional[str]:
        """Why it can no longer be trusted, if it cannot."""
        return self._inner.lost_reason

    def release(self) -> None:
        """Gives the lease back, at quorum."""
        _block(self._inner.release)

    async def release_async(self) -> None:
        """``release()`` for asyncio."""
        await _await(self._inner.release)

    def extend(self, ttl: float) -> None:
        """Moves its expiry to ``ttl`` seconds from now, at quorum."""
        _block(lambda: self._inner.extend(ttl))

    async def extend_async(self, ttl: float) -> None:
        """``extend()`` for asyncio."""
        await _await(lambda: self._inner.extend(ttl))

    def downgrade(self) -> "Lease":
        """Turns this writer's lease into a read lease of the same names,
        token and validity, on a quorum at once: no writer can take the
        lock in between, and the readers first in line join at once. In
        place: this Lease is then the read lease (``with`` gives it back),
        and it is returned. Refused (``InvalidInputError``, nothing sent)
        unless held alone. If a quorum did not confirm it, the lease is
        given back and the error says why."""
        self._swap(_block(self._inner.downgrade))
        return self

    async def downgrade_async(self) -> "Lease":
        """``downgrade()`` for asyncio."""
        self._swap(await _await(self._inner.downgrade))
        return self

    def _swap(self, inner: _redlease.Lease) -> None:
        self._inner = inner
        inner.on_lost(self._on_lost)

    def export(self) -> str:
        """A handle another process adopts (``Locker.adopt``): a secret.
        This Lease then holds nothing."""
        return _call(self._inner.export)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self._give_back()

    async def __aenter__(self) -> "Lease":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._give_back_async()

    def _give_back(self) -> None:
        try:
            self.release()
        except NotHeldError:
            pass  # lost meanwhile: ``lost`` said so

    async def _give_back_async(self) -> None:
        try:
            await self.release_async()
        except NotHeldError:
            pass

    def __repr__(self) -> str:
        return f"<redlease.Lease {self.resource!r} remaining={self.remaining:.3f}s>"


class Request:
    """A lock request, from ``Locker.lock`` and its kin: ``acquire()`` it
    (or ``await`` it), or use it as a context manager (``with`` or
    ``async with``), which gives the lease back when the block ends."""

    def __init__(self, start: Callable[[], _redlease.Pending]) -> None:
        self._start = start
        self._lease: Optional[Lease] = None

    def acquire(self) -> Lease:
        """Takes the lock, waiting as the request says; the Lease."""
        return Lease(_block(self._start))

    async def acquire_async(self) -> Lease:
        """``acquire()`` for asyncio."""
        return Lease(await _await(self._start))

    def __await__(self):  # type: ignore[no-untyped-def]
        return self.acquire_async().__await__()

    def __enter__(self) -> Lease:
        self._lease = self.acquire()
        return self._lease

    def __exit__(self, *exc: object) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease._give_back()

    async def __aenter__(self) -> Lease:
        self._lease = await self.acquire_async()
        return self._lease

    async def __aexit__(self, *exc: object) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            await lease._give_back_async()


class Semaphore:
    """At most ``permits`` holders of a name at once, from
    ``Locker.semaphore``."""

    def __init__(self, locker: "Locker", name: str, permits: int) -> None:
        self._locker = locker
        self.name = name
        self.permits = permits

    def acquire(
        self,
        n: int = 1,
        *,
        wait: Optional[float] = None,
        ttl: Optional[float] = None,
        keep_alive: bool = False,
    ) -> Request:
        """A request for ``n`` of its permits at once (one lease)."""
        return self._locker._request(
            [self.name], "permits", False, wait, ttl, keep_alive, n, self.permits
        )

    def try_acquire(
        self, n: int = 1, *, ttl: Optional[float] = None, keep_alive: bool = False
    ) -> Request:
        """A request for ``n`` permits that tries once."""
        return self._locker._request(
            [self.name], "permits", True, None, ttl, keep_alive, n, self.permits
        )


class Locker:
    """The Redis nodes and the settings every lock through them shares.

    One URL gives the single-instance lock (a server, a Cluster's
    ``redis+cluster://`` URL, a Sentinel primary); several independent
    ones, the Redlock quorum. Thread-safe: share one Locker per process.
    Settings: ``ttl`` (seconds, default 10), ``wait`` (how long a lock
    request waits by default; None: the library's 10 s), ``owner`` (the
    label the servers show for its leases; default HOST:PID),
    ``fencing``, ``lock_delay``, ``key_prefix``, ``node_timeout``,
    ``connect_timeout``, TLS files for ``rediss://`` nodes (``tls_ca``, a
    CA to trust instead of the system's; ``tls_cert`` and ``tls_key``, a
    client certificate), ``durability`` (a ``Durability``), and
    ``restart_quarantine`` (an expert's setting; 0 for brand-new test
    servers). Settings that cannot work together raise
    ``InvalidInputError`` here, before any connection."""

    def __init__(
        self,
        nodes: Union[str, Iterable[str]],
        *,
        ttl: float = 10.0,
        wait: Optional[float] = None,
        owner: Optional[str] = None,
        fencing: bool = False,
        lock_delay: float = 0.0,
        key_prefix: Optional[str] = None,
        node_timeout: Optional[float] = None,
        connect_timeout: Optional[float] = None,
        tls_ca: Optional[Union[str, "os.PathLike[str]"]] = None,
        tls_cert: Optional[Union[str, "os.PathLike[str]"]] = None,
        tls_key: Optional[Union[str, "os.PathLike[str]"]] = None,
        durability: Optional[Durability] = None,
        restart_quarantine: Optional[float] = None,
    ) -> None:
        urls = [nodes] if isinstance(nodes, str) else list(nodes)
        if durability is not None and not isinstance(durability, Durability):
            raise InvalidInputError(
                f"durability: a redlease.Durability, not {type(durability).__name__}"
            )
        _logging.refresh()
        try:
            self._inner = _redlease.Locker(
                urls,
                ttl=ttl,
                wait=wait,
                owner=owner,
                fencing=fencing,
                lock_delay=lock_delay,
                key_prefix=key_prefix,
                node_timeout=node_timeout,
                connect_timeout=connect_timeout,
                tls_ca=tls_ca,
                tls_cert=tls_cert,
                tls_key=tls_key,
                durability=None if durability is None else durability._raw(),
                restart_quarantine=restart_quarantine,
            )
        except _redlease.RawError as e:
            raise translate(e) from None
        except OverflowError as e:  # a count below 0 or too large
            raise InvalidInputError(str(e)) from None

    def _request(
        self,
        names: Sequence[str],
        mode: str,
        once: bool,
        wait: Optional[float],
        ttl: Optional[float],
        keep_alive: bool,
        permits: int = 1,
        of: int = 1,
    ) -> Request:
        names = list(names)
        return Request(
            lambda: self._inner.acquire(
                names,
                mode=mode,
                once=once,
                wait=wait,
                ttl=ttl,
                keep_alive=keep_alive,
                permits=permits,
                of=of,
            )
        )

    def lock(
        self,
        name: str,
        *,
        wait: Optional[float] = None,
        ttl: Optional[float] = None,
        keep_alive: bool = False,
    ) -> Request:
        """The lock on ``name``, alone: waits in turn up to ``wait``
        seconds (``WaitTimeoutError`` after). ``keep_alive=True`` renews
        it in the background until released or lost."""
        return self._request([name], "lock", False, wait, ttl, keep_alive)

    def try_lock(
        self, name: str, *, ttl: Optional[float] = None, keep_alive: bool = False
    ) -> Request:
        """The lock on ``name``, tried once (``TakenError`` if held)."""
        return self._request([name], "lock", True, None, ttl, keep_alive)

    def read_lock(
        self,
        name: str,
        *,
        wait: Optional[float] = None,
        ttl: Optional[float] = None,
        keep_alive: bool = False,
    ) -> Request:
        """A read hold of ``name``: any number of readers, or one writer."""
        return self._request([name], "read", False, wait, ttl, keep_alive)

    def write_lock(
        self,
        name: str,
        *,
        wait: Optional[float] = None,
        ttl: Optional[float] = None,
        keep_alive: bool = False,
    ) -> Request:
        """The write hold of ``name`` (the lock alone)."""
        return self._request([name], "write", False, wait, ttl, keep_alive)

    def lock_all(
        self,
        names: Iterable[str],
        *,
        wait: Optional[float] = None,
        ttl: Optional[float] = None,
        keep_alive: bool = False,
    ) -> Request:
        """Several locks at once, all or none, in any order (no deadlock)."""
        return self._request(list(names), "lock", False, wait, ttl, keep_alive)

    def semaphore(self, name: str, permits: int) -> Semaphore:
        """A semaphore of ``permits`` permits on ``name``."""
        return Semaphore(self, name, permits)

    def watch(self, name: str) -> "Watch":
        """``name``'s state now, then at each change (see ``Watch``)."""
        from ._election import Watch

        return Watch(self._inner.watch(name))

    def election(self, name: str) -> "Election":
        """The election on ``name`` (see ``Election``)."""
        from ._election import Election

        return Election(self, name)

    def inspect(self, name: str) -> dict:
        """What every node says of ``name``: verdict, holders, counts."""
        return _block(lambda: self._inner.inspect(name))

    async def inspect_async(self, name: str) -> dict:
        """``inspect()`` for asyncio."""
        return await _await(lambda: self._inner.inspect(name))

    def force_release(self, name: str) -> int:
        """Deletes the lock on ``name`` whoever holds it (an operator's
        tool); on how many nodes."""
        return _block(lambda: self._inner.force_release(name))

    async def force_release_async(self, name: str) -> int:
        """``force_release()`` for asyncio."""
        return await _await(lambda: self._inner.force_release(name))

    def adopt(self, handle: str) -> Lease:
        """Takes over a lease another process exported."""
        return Lease(_block(lambda: self._inner.adopt(handle)))

    async def adopt_async(self, handle: str) -> Lease:
        """``adopt()`` for asyncio."""
        return Lease(await _await(lambda: self._inner.adopt(handle)))

    def close(self) -> None:
        """Gives back every lease and stops taking locks."""
        _block(self._inner.close)

    async def close_async(self) -> None:
        """``close()`` for asyncio."""
        await _await(self._inner.close)

    def __enter__(self) -> "Locker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Locker":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close_async()
