"""Each call in both forms, against real servers."""

import asyncio
import os
import signal
import threading
import time

import pytest

import redlease
from conftest import make_locker


def test_a_lock_is_held_alone_and_given_back_by_with(server):
    a = make_locker(server.url, owner="worker-a")
    b = make_locker(server.url)
    with a.lock("job", wait=2) as lease:
        assert lease.resource == "job"
        assert 0 < lease.remaining <= 5
        with pytest.raises(redlease.TakenError) as refused:
            b.try_lock("job").acquire()
        assert "worker-a" in str(refused.value)
        status = b.inspect("job")
        assert status["verdict"] == "held"
        assert [h["owner"] for h in status["holders"]] == ["worker-a"]
    # Given back when the block ended:
    b.try_lock("job").acquire().release()
    a.close()
    b.close()


def test_fencing_tokens_rise_and_a_released_lease_is_not_held(server):
    locker = make_locker(server.url, fencing=True)
    first = locker.lock("f").acquire()
    token = first.fencing_token
    first.release()
    with pytest.raises(redlease.NotHeldError):
        first.release()
    second = locker.lock("f").acquire()
    assert second.fencing_token > token
    second.extend(5)
    second.release()


def test_a_wait_runs_out_as_a_timeout(server):
    locker = make_locker(server.url)
    held = locker.lock("w").acquire()
    started = time.monotonic()
    with pytest.raises(redlease.WaitTimeoutError) as e:
        make_locker(server.url).lock("w", wait=0.3).acquire()
    assert isinstance(e.value, TimeoutError)
    assert time.monotonic() - started < 3
    held.release()


def test_bad_input_is_a_value_error_before_any_io(server):
    with pytest.raises(redlease.InvalidInputError) as e:
        make_locker(server.url, ttl=-1)
    assert isinstance(e.value, ValueError)
    locker = make_locker(server.url)
    with pytest.raises(redlease.InvalidInputError):
        locker.lock("").acquire()
    with pytest.raises(redlease.InvalidInputError):
        locker.lock("x", wait=float("nan")).acquire()


def test_readers_share_and_a_writer_waits(server):
    locker = make_locker(server.url)
    r1 = locker.read_lock("doc").acquire()
    r2 = locker.read_lock("doc").acquire()
    assert locker.inspect("doc")["readers"] == 2
    with pytest.raises(redlease.WaitTimeoutError):
        locker.write_lock("doc", wait=0.2).acquire()
    r1.release()
    r2.release()
    locker.write_lock("doc", wait=2).acquire().release()


def test_a_semaphore_admits_its_permits_and_no_more(server):
    locker = make_locker(server.url)
    sem = locker.semaphore("pool", 3)
    two = sem.acquire(2).acquire()
    one = sem.acquire().acquire()
    with pytest.raises(redlease.TakenError):
        sem.try_acquire().acquire()
    two.release()
    one.release()


def test_several_names_all_or_none(server):
    locker = make_locker(server.url)
    with locker.lock_all(["b", "a"], wait=2):
        with pytest.raises(redlease.TakenError):
            locker.try_lock("a").acquire()


def test_a_kept_alive_lease_outlives_its_ttl(server):
    locker = make_locker(server.url, ttl=0.6)
    lease = locker.lock("long", keep_alive=True).acquire()
    time.sleep(1.5)
    assert not lease.lost.is_set()
    assert lease.remaining > 0
    lease.release()


def test_a_lost_lease_sets_lost_and_calls_back(server):
    locker = make_locker(server.url, ttl=0.9)
    lease = locker.lock("lost", keep_alive=True).acquire()
    told = []
    lease.on_lost(told.append)
    locker.force_release("lost")
    assert lease.lost.wait(3), "told within its TTL"
    assert lease.lost_reason is not None
    assert told and told[0] == lease.lost_reason
    with pytest.raises(redlease.NotHeldError):
        lease.release()


def test_an_exported_lease_is_adopted(server):
    locker = make_locker(server.url)
    handle = locker.lock("handed").acquire().export()
    other = make_locker(server.url)
    lease = other.adopt(handle)
    assert lease.resource == "handed"
    lease.release()


def test_an_interrupted_wait_leaves_nothing_behind(server):
    locker = make_locker(server.url)
    held = locker.lock("busy").acquire()
    waiter = make_locker(server.url)
    # Ctrl-C in the middle of a wait: raised at once, nothing left queued.
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        waiter.lock("busy", wait=30).acquire()
    assert time.monotonic() - started < 2
    time.sleep(0.3)
    assert waiter.inspect("busy")["queued"] == 0
    held.release()
    # And the name is free for anyone.
    waiter.try_lock("busy").acquire().release()


def test_the_async_forms(server):
    async def main():
        locker = make_locker(server.url)
        async with locker.lock("a", wait=2) as lease:
            assert lease.remaining > 0
            with pytest.raises(redlease.TakenError):
                await locker.try_lock("a")
        lease = await locker.lock("a")
        await lease.extend_async(5)
        await lease.release_async()
        status = await locker.inspect_async("a")
        assert status["verdict"] == "free"
        await locker.close_async()

    asyncio.run(main())


def test_every_other_call_in_its_async_form(server):
    async def main():
        locker = make_locker(server.url)
        other = make_locker(server.url)
        async with locker.read_lock("rw") as r1, other.read_lock("rw") as r2:
            assert r1.mode == r2.mode == "shared"
        async with locker.write_lock("rw") as w:
            assert await w.downgrade_async() is w and w.mode == "shared"
            async with other.read_lock("rw", wait=1):
                pass
        sem = locker.semaphore("pool", 3)
        async with sem.acquire(2) as two:
            assert two.mode == "permit"
            with pytest.raises(redlease.TakenError):
                await sem.try_acquire(2)
        async with locker.lock_all(["n1", "n2"]) as both:
            assert both.resources == ["n1", "n2"]
        handle = (await locker.lock("moved")).export()
        adopted = await other.adopt_async(handle)
        assert adopted.resource == "moved"
        assert await locker.force_release_async("moved") == 1
        assert await asyncio.wait_for(adopted.wait_lost(), 10) is not None
        await locker.close_async()
        await other.close_async()

    asyncio.run(main())


def test_a_cancelled_task_leaves_nothing_behind(server):
    async def main():
        locker = make_locker(server.url)
        held = await locker.lock("c")
        waiter = asyncio.create_task(make_locker(server.url).lock("c", wait=30).acquire_async())
        await asyncio.sleep(0.3)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await asyncio.sleep(0.3)
        assert (await locker.inspect_async("c"))["queued"] == 0
        await held.release_async()

    asyncio.run(main())


def test_many_threads_take_turns(server):
    locker = make_locker(server.url)
    inside = []
    overlap = []

    def work(i):
        for _ in range(5):
            with locker.lock("shared", wait=20):
                inside.append(i)
                if len(inside) > 1:
                    overlap.append(list(inside))
                time.sleep(0.005)
                inside.remove(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not overlap


def test_a_forked_child_gets_a_clear_error(server):
    locker = make_locker(server.url)
    locker.lock("before-fork").acquire().release()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            locker.lock("in-child").acquire()
        except redlease.ForkedError:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_three_nodes_quorum(servers):
    locker = make_locker([s.url for s in servers])
    with locker.lock("q") as lease:
        status = locker.inspect("q")
        assert status["verdict"] == "held"
        assert len(status["nodes"]) == 3
        assert lease.remaining > 0


def test_a_released_lease_is_never_told_lost(server):
    locker = make_locker(server.url, ttl=0.5)
    lease = locker.lock("let-go").acquire()
    told = []
    lease.on_lost(told.append)
    lease.release()
    time.sleep(1.0)  # past its TTL
    assert told == []
    assert not lease.lost.is_set()
