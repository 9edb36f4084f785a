"""Durability: how many replicas must acknowledge every write of a lease."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Durability:
    """``WAIT replicas timeout`` after every write of a lease (its acquire,
    each extend and renewal), for locks that must survive the failover of
    a replicated primary (Sentinel, a cluster with replicas).

    ``required=True``: a node whose write fewer replicas acknowledged in
    time does not count toward the quorum. ``required=False``: best
    effort, ``Lease.replicas_acknowledged`` says how many did.
    ``fsync=True``: ``WAITAOF`` instead, a write counts once fsynced to the
    append-only file (Redis 7.2+, ``appendonly yes``). ``timeout`` plus
    0.1 s must be shorter than the Locker's ``node_timeout``.

    >>> redlease.Locker(urls, node_timeout=0.3,            # doctest: +SKIP
    ...                 durability=redlease.Durability(1, timeout=0.1))
    """

    replicas: int
    timeout: float
    required: bool = True
    fsync: bool = False

    def _raw(self) -> tuple[str, int, float, bool]:
        kind = "required" if self.required else "best_effort"
        return (kind, self.replicas, self.timeout, self.fsync)
