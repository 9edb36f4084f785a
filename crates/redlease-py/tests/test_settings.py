"""The Locker's settings: TLS, durability, logging, and property tests
that no keyword argument, however wrong, gets past the checks (a typed
error before any I/O, never a panic)."""

import logging
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redlease
from conftest import Server, eventually, make_locker

# Every float Python has, the awkward ones included.
seconds = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, -1e-9, 1e-9, 2.0**64, 1e300, -1.0, math.inf, math.nan]),
)
counts = st.integers(min_value=-(2**70), max_value=2**70)


@pytest.fixture(scope="module")
def shared_server():
    s = Server()
    yield s
    s.stop()


@settings(max_examples=300, deadline=None)
@given(
    ttl=seconds,
    wait=st.none() | seconds,
    lock_delay=seconds,
    node_timeout=st.none() | seconds,
    connect_timeout=st.none() | seconds,
    quarantine=st.none() | seconds,
)
def test_any_duration_builds_or_is_refused_with_a_value_error(
    ttl, wait, lock_delay, node_timeout, connect_timeout, quarantine
):
    # Nothing listens on port 1: building must not connect.
    try:
        locker = redlease.Locker(
            "redis://127.0.0.1:1",
            ttl=ttl,
            wait=wait,
            lock_delay=lock_delay,
            node_timeout=node_timeout,
            connect_timeout=connect_timeout,
            restart_quarantine=quarantine,
        )
    except redlease.InvalidInputError as e:
        assert isinstance(e, ValueError) and str(e)
        return
    # Built: every duration was a real number of seconds, 0 or more.
    for value in (ttl, lock_delay):
        assert value >= 0 and math.isfinite(value)
    locker.close()


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    n=counts,
    permits=counts,
    wait=st.none() | seconds,
    ttl=st.none() | seconds,
    names=st.lists(st.text(max_size=8), max_size=3),
)
def test_any_request_is_granted_or_refused_with_a_typed_error(
    shared_server, n, permits, wait, ttl, names
):
    locker = make_locker(shared_server.url)
    before = shared_server.commands_processed()
    requests = [
        lambda: locker.semaphore("prop-sem", permits).try_acquire(n, ttl=ttl),
        lambda: locker.lock_all(names, wait=wait, ttl=ttl),
        lambda: locker.lock(names[0] if names else "", wait=wait, ttl=ttl),
    ]
    for make in requests:
        try:
            lease = make().acquire()
        except redlease.InvalidInputError:
            # Refused before any I/O: only our own INFO reached the server.
            assert shared_server.commands_processed() == before + 1
        except redlease.RedleaseError:
            # A valid request that failed, typed: its permits are held, or a
            # TTL of a few ms leaves a node timeout no reply meets.
            pass
        else:
            lease.release()
        before = shared_server.commands_processed()
    locker.close()


def test_a_client_certificate_needs_its_key(server, pki):
    with pytest.raises(redlease.InvalidInputError, match="tls_key"):
        redlease.Locker("rediss://127.0.0.1:1", tls_ca=pki.ca, tls_cert=pki.client_cert)
    with pytest.raises(redlease.InvalidInputError, match="version 1"):
        redlease.Locker(
            "rediss://127.0.0.1:1", tls_cert=pki.v1_client_cert, tls_key=pki.client_key
        )
    with pytest.raises(redlease.InvalidInputError, match="tls_ca"):
        redlease.Locker("rediss://127.0.0.1:1", tls_ca="/nonexistent/ca.crt")
    # TLS settings with no TLS node to apply them to: refused, not ignored.
    with pytest.raises(redlease.InvalidInputError):
        redlease.Locker(server.url, tls_ca=pki.ca)


def test_tls_with_a_ca_and_a_client_certificate(pki):
    plain_tls = Server(tls=pki)
    mutual = Server(tls=pki, client_auth=True)
    try:
        with make_locker(plain_tls.url, tls_ca=pki.ca).lock("t") as lease:
            assert lease.remaining > 0
        # Without our CA the server's certificate is not trusted.
        with pytest.raises(redlease.NoQuorumError):
            make_locker(plain_tls.url, node_timeout=1).try_lock("t").acquire()
        # A server that asks for a client certificate: ours, or nothing.
        locker = make_locker(
            mutual.url, tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key
        )
        with locker.lock("t", keep_alive=True) as lease:
            assert lease.lost_reason is None
        with pytest.raises(redlease.NoQuorumError):
            make_locker(mutual.url, tls_ca=pki.ca, node_timeout=1).try_lock("t").acquire()
    finally:
        plain_tls.stop()
        mutual.stop()


def test_durability_on_a_primary_with_no_replica(server):
    best = make_locker(
        server.url,
        node_timeout=1,
        durability=redlease.Durability(1, timeout=0.05, required=False),
    )
    with best.lock("d") as lease:
        assert lease.replicas_acknowledged == 0
    required = make_locker(
        server.url, node_timeout=1, durability=redlease.Durability(1, timeout=0.05)
    )
    with pytest.raises(redlease.NoQuorumError):
        required.try_lock("d").acquire()
    # Nothing left behind by the refused acquire.
    assert best.inspect("d")["verdict"] == "free"
    # A WAIT that may outlast the node timeout cannot work: refused.
    with pytest.raises(redlease.InvalidInputError, match="timeout"):
        make_locker(server.url, node_timeout=0.1, durability=redlease.Durability(1, 0.5))
    with pytest.raises(redlease.InvalidInputError, match="Durability"):
        make_locker(server.url, durability=(1, 0.1))


def test_a_writer_downgrades_in_place(server):
    locker = make_locker(server.url)
    other = make_locker(server.url)
    with locker.write_lock("cat") as lease:
        token = lease.fencing_token
        assert lease.downgrade() is lease
        assert lease.mode == "shared" and lease.fencing_token == token
        with other.read_lock("cat", wait=1):
            pass  # readers join beside it
        with pytest.raises(redlease.TakenError):
            other.try_lock("cat").acquire()
        with pytest.raises(redlease.InvalidInputError):
            lease.downgrade()  # a reader's lease does not downgrade ...
        assert lease.remaining > 0  # ... and is kept
    # The with block gave the read lease back.
    assert other.inspect("cat")["verdict"] == "free"


def test_the_librarys_log_events_reach_logging(server, caplog):
    caplog.set_level(logging.WARNING, logger="redlease")
    locker = make_locker(server.url)  # reads the level
    lease = locker.lock("logged").acquire()
    assert locker.force_release("logged") == 1
    record = eventually(
        lambda: next((r for r in caplog.records if "force-released" in r.getMessage()), None),
        what="the force release's log event",
    )
    assert record.name.startswith("redlease.") and record.levelno == logging.WARNING
    assert "resource=logged" in record.getMessage()
    with pytest.raises(redlease.NotHeldError):
        lease.release()  # the operator took it
    # Below the level, nothing is passed on.
    caplog.clear()
    caplog.set_level(logging.ERROR, logger="redlease")
    redlease.refresh_logging()
    quiet = locker.lock("quiet").acquire()
    locker.force_release("quiet")
    with pytest.raises(redlease.NotHeldError):
        quiet.release()
    locker.close()
    assert not [r for r in caplog.records if r.name.startswith("redlease.")]
