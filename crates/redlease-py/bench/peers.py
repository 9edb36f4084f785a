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
    target/py-venv/bin/python crates/redlease-py/bench/peers.py --seconds 3 --rounds 3 \\
        [--json] [--write]      # --write: BENCHMARKS.md's table, between its markers
    target/py-venv/bin/python crates/redlease-py/bench/peers.py --from runs.jsonl [--write]

The bench measures what the venv has installed: build the package in release
first (``maturin develop --release`` in crates/redlease-py).
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



BEGIN = "<!-- python-peers:begin -->"
END = "<!-- python-peers:end -->"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def measure(rounds, seconds):
    """Every client's rows, `rounds` times, the clients in a rotated order
    each round (drift over the run falls on each alike); the JSON lines."""
    proc, port = start_server()
    runs = {name: [] for name in CLIENTS}
    try:
        names = list(CLIENTS)
        for r in range(rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                # Made afresh each round: an asyncio client is bound to the
                # event loop it first ran on, and each round has its own.
                try:
                    threads, tasks = CLIENTS[name](port)
                except ImportError as e:
                    if r == 0:
                        print(f"skipped {name}: {e}", file=sys.stderr)
                    continue
                runs[name].append({
                    "uncontended": uncontended(*threads, seconds),
                    "threads": contended_threads(*threads, seconds),
                    "tasks": contended_tasks(*tasks, seconds) if tasks else None,
                })
                print(f"round {r + 1}/{rounds}: {name}", file=sys.stderr)
    finally:
        proc.kill()
        proc.wait(10)
    return [
        {"client": n, "seconds": seconds, "rounds": rs, "context": context()}
        for n, rs in runs.items()
        if rs
    ]


def context():
    """What the figures were measured with."""
    from importlib import metadata

    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    program = os.environ.get("REDLEASE_SERVER") or shutil.which("redis-server")
    out = subprocess.run([program, "--version"], capture_output=True, text=True).stdout
    server = out.split(" v=")[1].split()[0] if " v=" in out else "?"
    kind = "valkey-server" if "valkey" in out.lower() else "redis-server"
    return {
        "server": f"{kind} {server}",
        "python": sys.version.split()[0],
        "cores": os.cpu_count(),
        "redis-py": version("redis"),
        "python-redis-lock": version("python-redis-lock"),
        "pottery": version("pottery"),
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def median(rounds, row, field):
    values = [r[row][field] for r in rounds if r[row] and r[row].get(field) is not None]
    return statistics.median(values) if values else None


def table(lines):
    """The Markdown: the table of medians over the rounds, then the spread."""
    def cell(x, fmt):
        return "-" if x is None else format(x, fmt)

    ctx = lines[0]["context"]
    rounds = len(lines[0]["rounds"])
    out = [
        f"Measured {ctx['at']} on {ctx['cores']} cores, {ctx['server']}, redis-py "
        f"{ctx['redis-py']}, python-redis-lock {ctx['python-redis-lock']}, pottery "
        f"{ctx['pottery']}, CPython {ctx['python']}; the median of {rounds} rounds of "
        f"{lines[0]['seconds']:g} s per row, the clients in a rotated order each round:",
        "",
        "| client | uncontended cycles/s | 8 threads cycles/s | same-worker | wait p99 ms "
        "| 8 tasks cycles/s | same-worker | wait p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    spreads = []
    for line in lines:
        rs = line["rounds"]
        out.append(
            f"| {line['client']} | {cell(median(rs, 'uncontended', 'cycles_per_s'), ',.0f')} "
            f"| {cell(median(rs, 'threads', 'cycles_per_s'), ',.0f')} "
            f"| {cell(median(rs, 'threads', 'same_worker'), '.3f')} "
            f"| {cell(median(rs, 'threads', 'wait_p99_ms'), ',.1f')} "
            f"| {cell(median(rs, 'tasks', 'cycles_per_s'), ',.0f')} "
            f"| {cell(median(rs, 'tasks', 'same_worker'), '.3f')} "
            f"| {cell(median(rs, 'tasks', 'wait_p99_ms'), ',.1f')} |"
        )
        worst = 0.0
        for row in ("uncontended", "threads", "tasks"):
            values = [r[row]["cycles_per_s"] for r in rs if r[row]]
            if values and min(values) > 0:
                worst = max(worst, max(values) / min(values) - 1)
        spreads.append(f"{line['client']} {worst * 100:.0f}%")
    out += [
        "",
        "Largest spread of a cycles/s cell between its rounds (max/min - 1): "
        + ", ".join(spreads) + ".",
    ]
    return "\n".join(out)


def write(text):
    path = os.path.join(ROOT, "BENCHMARKS.md")
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        sys.exit(f"BENCHMARKS.md has no {BEGIN} ... {END} markers")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    print(f"wrote {path}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="per row and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", action="store_true", help="print the JSON lines too")
    p.add_argument("--from", dest="source", help="table from saved --json lines, no run")
    p.add_argument("--write", action="store_true", help="rewrite BENCHMARKS.md's table")
    a = p.parse_args()
    if not 0 < a.seconds <= 600 or not 1 <= a.rounds <= 50:
        sys.exit("--seconds must be in (0, 600] and --rounds in [1, 50]")
    if a.source:
        with open(a.source) as f:
            lines = [json.loads(line) for line in f if line.startswith("{")]
    else:
        lines = measure(a.rounds, a.seconds)
    text = table(lines)
    print(text)
    if a.json:
        for line in lines:
            print(json.dumps(line))
    if a.write:
        write(text)


if __name__ == "__main__":
    main()
