#!/usr/bin/env python3
"""redlease from Python against the Python lock libraries, on the same
redis-server, in one run (issue 51, item 5).

Rows: one worker taking and giving back a free lock (uncontended cycles
per second); 8 threads contending for one lock; 8 asyncio tasks
contending for one lock. For each: cycles/s, the share of acquisitions
that went to the worker that had it just before (same-worker: near 1
means the lock is handed back to whoever just let go, unfair), and the
99th percentile of the wait for the lock.

Peers (installed with pip in the bench's venv): redis-py's ``Lock`` (and
its asyncio ``Lock``), python-redis-lock, pottery's ``Redlock`` (and
``AIORedlock``). Each with its defaults, but for a wait bound. A client
without an asyncio lock has no asyncio row.

    target/py-venv/bin/pip install redis python-redis-lock pottery
    target/py-venv/bin/python crates/redlease-py/bench/peers.py --seconds 3 [--json]
"""

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

WORKERS = 8


def start_server():
    program = os.environ.get("REDLEASE_SERVER") or shutil.which("redis-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)


# Each client: (name, make(port) -> (take(name), give(handle)) for threads,
# and optionally an asyncio pair).


def redlease_client(port):
    import redlease

    locker = redlease.Locker(f"redis://127.0.0.1:{port}", ttl=10, restart_quarantine=0)

    def take(name):
        return locker.lock(name, wait=30).acquire()

    def give(lease):
        lease.release()

    async def atake(name):
        return await locker.lock(name, wait=30)

    async def agive(lease):
        await lease.release_async()

    return (take, give), (atake, agive)


def redis_py_client(port):
    import redis
    import redis.asyncio

    conn = redis.Redis(port=port)
    aconn = redis.asyncio.Redis(port=port)

    def take(name):
        lock = conn.lock(name, timeout=10, blocking_timeout=30)
        assert lock.acquire()
        return lock

    def give(lock):
        lock.release()

    async def atake(name):
        lock = aconn.lock(name, timeout=10, blocking_timeout=30)
        assert await lock.acquire()
        return lock

    async def agive(lock):
        await lock.release()

    return (take, give), (atake, agive)


def python_redis_lock_client(port):
    import redis
    import redis_lock

    conn = redis.Redis(port=port)

    def take(name):
        lock = redis_lock.Lock(conn, name, expire=30)
        assert lock.acquire(timeout=30)
        return lock

    def give(lock):
        lock.release()

    return (take, give), None


def pottery_client(port):
    import redis
    import redis.asyncio
    from pottery import AIORedlock, Redlock

    conn = redis.Redis(port=port)
    aconn = redis.asyncio.Redis(port=port)

    def take(name):
        lock = Redlock(key=name, masters={conn}, auto_release_time=10)
        assert lock.acquire(timeout=30)
        return lock

    def give(lock):
        lock.release()

    async def atake(name):
        lock = AIORedlock(key=name, masters={aconn}, auto_release_time=10)
        assert await lock.acquire(timeout=30)
        return lock

    async def agive(lock):
        await lock.release()

    return (take, give), (atake, agive)


CLIENTS = {
    "redlease": redlease_client,
    "redis-py": redis_py_client,
    "python-redis-lock": python_redis_lock_client,
    "pottery": pottery_client,
}


def p99(waits):
    if not waits:
        return None
    waits = sorted(waits)
    return waits[min(len(waits) - 1, int(round(0.99 * (len(waits) - 1))))]


def uncontended(take, give, seconds):
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        give(take("bench-free"))
        n += 1
    return {"cycles_per_s": n / seconds}


def contended_threads(take, give, seconds):
    order, waits, stop = [], [], time.monotonic() + seconds
    lock = threading.Lock()

    def work(i):
        while time.monotonic() < stop:
            asked = time.monotonic()
            held = take("bench-shared")
            with lock:
                waits.append(time.monotonic() - asked)
                order.append(i)
            give(held)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    return figures(order, waits, seconds)


def contended_tasks(atake, agive, seconds):
    order, waits = [], []

    async def main():
        stop = time.monotonic() + seconds

        async def work(i):
            while time.monotonic() < stop:
                asked = time.monotonic()
                held = await atake("bench-shared-async")
                waits.append(time.monotonic() - asked)
                order.append(i)
                await agive(held)

        await asyncio.wait_for(
            asyncio.gather(*(work(i) for i in range(WORKERS))), seconds + 60
        )

    asyncio.run(main())
    return figures(order, waits, seconds)


def figures(order, waits, seconds):
    same = sum(1 for a, b in zip(order, order[1:]) if a == b)
    return {
        "cycles_per_s": len(order) / seconds,
        "same_worker": same / max(1, len(order) - 1),
        "wait_p99_ms": None if not waits else p99(waits) * 1000,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if not 0 < a.seconds <= 600:
        sys.exit("--seconds must be in (0, 600]")
    proc, port = start_server()
    rows = []
    try:
        for name, make in CLIENTS.items():
            try:
                threads, tasks = make(port)
            except ImportError as e:
                print(f"skipped {name}: {e}", file=sys.stderr)
                continue
            row = {"client": name}
            row["uncontended"] = uncontended(*threads, a.seconds)
            row["threads"] = contended_threads(*threads, a.seconds)
            row["tasks"] = contended_tasks(*tasks, a.seconds) if tasks else None
            rows.append(row)
            print(f"done {name}", file=sys.stderr)
    finally:
        proc.kill()
        proc.wait(10)

    def cell(x, fmt):
        return "-" if x is None else format(x, fmt)

    print("| client | uncontended cycles/s | 8 threads cycles/s | same-worker | wait p99 ms "
          "| 8 tasks cycles/s | same-worker | wait p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        t, k = r["threads"], r["tasks"] or {}
        print(
            f"| {r['client']} | {r['uncontended']['cycles_per_s']:,.0f} "
            f"| {t['cycles_per_s']:,.0f} | {t['same_worker']:.3f} | {cell(t['wait_p99_ms'], ',.1f')} "
            f"| {cell(k.get('cycles_per_s'), ',.0f')} | {cell(k.get('same_worker'), '.3f')} "
            f"| {cell(k.get('wait_p99_ms'), ',.1f')} |"
        )
    if a.json:
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
