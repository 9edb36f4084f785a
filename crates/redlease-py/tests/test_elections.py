"""Watching a name and elections, in both forms, against real servers."""

import asyncio
import threading

import pytest

import redlease
from conftest import make_locker


def test_a_watch_is_told_each_change(server):
    locker = make_locker(server.url, owner="w")
    watch = locker.watch("job")
    assert watch.changed()["verdict"] == "free"
    lease = locker.lock("job").acquire()
    held = watch.changed()
    assert held["verdict"] == "held"
    assert [h["owner"] for h in held["holders"]] == ["w"]
    lease.release()
    assert watch.changed()["verdict"] == "free"


def test_one_leader_at_a_time(server):
    a = make_locker(server.url, owner="a")
    b = make_locker(server.url, owner="b")
    election = a.election("scheduler")
    observe = b.election("scheduler").observe()
    assert observe.next() is None
    lead = election.campaign("10.0.0.1:80")
    told = observe.next()
    assert (told["value"], told["term"], told["owner"]) == ("10.0.0.1:80", lead.term, "a")
    assert b.election("scheduler").leader()["term"] == lead.term
    with pytest.raises(redlease.WaitTimeoutError):
        b.election("scheduler").campaign("b", wait=0.2)
    lead.proclaim("10.0.0.1:81")
    assert observe.next()["value"] == "10.0.0.1:81"
    assert lead.value == "10.0.0.1:81"
    # b waits in turn and leads once a resigns, in a higher term.
    got = []
    waiter = threading.Thread(target=lambda: got.append(b.election("scheduler").campaign("b")))
    waiter.start()
    lead.resign()
    waiter.join(10)
    assert got and got[0].term > lead.term
    with got[0]:
        pass  # resigned at the end of the block
    assert b.election("scheduler").leader() is None


def test_a_deposed_leader_is_told(server):
    locker = make_locker(server.url, ttl=0.9)
    lead = locker.election("e").campaign("x")
    locker.force_release("e")
    assert lead.lost.wait(3)
    with pytest.raises(redlease.NotHeldError):
        lead.resign()


def test_the_async_forms(server):
    async def main():
        locker = make_locker(server.url)
        watch = locker.watch("e")
        assert (await watch.changed_async())["verdict"] == "free"
        election = locker.election("e")
        async with await election.campaign_async("v") as lead:
            assert (await election.leader_async())["term"] == lead.term
            status = await watch.changed_async()
            assert status["verdict"] == "held"
            await lead.proclaim_async("w")
            seen = election.observe()
            assert (await seen.next_async())["value"] == "w"
        assert await seen.next_async() is None  # resigned: nobody leads
        assert await election.leader_async() is None

    asyncio.run(main())
