"""Watching a name, and elections: the Python faces of the library's
``Locker::watch`` and ``Locker::election``. Each call plain (threads) and
``async`` (asyncio), stopped at once by Ctrl-C or a cancelled task."""

from __future__ import annotations

from typing import Any, AsyncIterator, Iterator, Optional

from . import _redlease
from ._errors import NotHeldError
from ._locker import _await, _block, _LostSignal


class Watch:
    """A name's state (``Locker.inspect``'s dict), first now and then at
    each change, told by the servers, not polled. Iterate it (``for``, or
    ``async for``), or call ``changed()``."""

    def __init__(self, inner: _redlease.Watcher) -> None:
        self._inner = inner

    def changed(self) -> dict:
        """The state now on the first call, then the next change."""
        return _block(self._inner.changed)

    async def changed_async(self) -> dict:
        """``changed()`` for asyncio."""
        return await _await(self._inner.changed)

    def __iter__(self) -> Iterator[dict]:
        while True:
            yield self.changed()

    async def __aiter__(self) -> AsyncIterator[dict]:
        while True:
            yield await self.changed_async()


class Observe:
    """An election's leader (a dict: value, term, revision, owner, since;
    None when nobody leads), now and then at each change. Terms never go
    back."""

    def __init__(self, inner: _redlease.Observer) -> None:
        self._inner = inner

    def next(self) -> Optional[dict]:
        """The leader now on the first call, then the next change."""
        return _block(self._inner.next)

    async def next_async(self) -> Optional[dict]:
        """``next()`` for asyncio."""
        return await _await(self._inner.next)

    def __iter__(self) -> Iterator[Optional[dict]]:
        while True:
            yield self.next()

    async def __aiter__(self) -> AsyncIterator[Optional[dict]]:
        while True:
            yield await self.next_async()


class Leadership(_LostSignal):
    """The lead of an election, kept alive until resigned or lost; a
    context manager that resigns at the end of its block. ``lost`` is set
    (after the ``on_lost`` callbacks) once the lead can no longer be
    trusted: stop leading then."""

    def __init__(self, inner: _redlease.Leadership) -> None:
        self._inner = inner
        self._watch(inner, f"the lead in term {inner.term}")

    @property
    def term(self) -> int:
        """The lead's term: its lease's fencing token, higher for every new
        leader."""
        return self._inner.term

    @property
    def value(self) -> Optional[str]:
        """The value last proclaimed."""
        return self._inner.value

    @property
    def lost_reason(self) -> Optional[str]:
        return self._inner.lost_reason

    def proclaim(self, value: str) -> None:
        """Publishes a new value on a quorum."""
        _block(lambda: self._inner.proclaim(value))

    async def proclaim_async(self, value: str) -> None:
        await _await(lambda: self._inner.proclaim(value))

    def resign(self) -> None:
        """Gives the lead up at once: the next campaigner leads."""
        _block(self._inner.resign)

    async def resign_async(self) -> None:
        await _await(self._inner.resign)

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.resign()
        except NotHeldError:
            pass

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.resign_async()
        except NotHeldError:
            pass


class Election:
    """One leader at a time among the processes that campaign for a name
    (``Locker.election``)."""

    def __init__(self, locker: Any, name: str) -> None:
        self._locker = locker
        self.name = name

    def campaign(
        self, value: str, *, wait: Optional[float] = None, ttl: Optional[float] = None
    ) -> Leadership:
        """Waits in turn to lead (for ever unless ``wait`` seconds), then
        publishes ``value``; the lead is kept alive."""
        inner = self._locker._inner
        return Leadership(
            _block(lambda: inner.campaign(self.name, value, wait=wait, ttl=ttl))
        )

    async def campaign_async(
        self, value: str, *, wait: Optional[float] = None, ttl: Optional[float] = None
    ) -> Leadership:
        inner = self._locker._inner
        return Leadership(
            await _await(lambda: inner.campaign(self.name, value, wait=wait, ttl=ttl))
        )

    def leader(self) -> Optional[dict]:
        """Who leads now (value, term, revision, owner, since), or None."""
        return _block(lambda: self._locker._inner.leader(self.name))

    async def leader_async(self) -> Optional[dict]:
        return await _await(lambda: self._locker._inner.leader(self.name))

    def observe(self) -> Observe:
        """The leader now, then each change."""
        return Observe(self._locker._inner.observe(self.name))
