"""A `--cluster` that is not a reachable Dask scheduler fails within 10 s, names the address and what
answered there, and leaves no client, thread or traceback behind."""

import gc
import http.server
import socket
import threading
import time
from contextlib import contextmanager

import pytest
from distributed import LocalCluster
from distributed.security import Security

from fragnb.runtime.cluster import clusters
from fragnb.runtime.cluster.clusters import ClusterError
from fragnb.runtime.cluster.probe import ProbeError, check_scheduler


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(handle):
    """A TCP server on loopback that runs ``handle(connection)`` for each client; its address."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                handle(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()


@contextmanager
def http_server():
    """A web server on loopback, as a Jupyter server or a Dask dashboard is."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def refused(address: str, match: str, **kwargs) -> float:
    start = time.monotonic()
    with pytest.raises(ProbeError, match=match):
        check_scheduler(address, **kwargs)
    return time.monotonic() - start


def test_a_web_server_is_named_as_one_within_seconds():
    with http_server() as address:
        assert (
            refused(
                address,
                rf"an HTTP server answers at {address} \('HTTP/1.0 200 OK'\), not a Dask scheduler: "
                r"a Jupyter server or a Dask dashboard\?",
            )
            < 10
        )
        assert refused(address.replace("tcp://", "tls://"), "an HTTP server answers at tls://") < 10


def test_nothing_listening_an_unknown_host_and_a_malformed_address_are_told_apart():
    port = free_port()
    assert refused(f"tcp://127.0.0.1:{port}", rf"nothing listens at tcp://127.0.0.1:{port} \(connection refused\)") < 10
    refused("tcp://no-such-host.invalid:8786", "no host named 'no-such-host.invalid' is known here")
    refused("tcp://127.0.0.1", "is not an address of the form tcp://host:port")


def test_a_server_that_says_nothing_or_something_else_is_refused_within_seconds():
    with serving(lambda conn: time.sleep(4)) as silent:
        assert refused(silent, "answers neither as a Dask scheduler, a TLS server nor an HTTP server does") < 10
    with serving(lambda conn: conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")) as ssh:
        assert refused(ssh, r"not as a Dask scheduler does \(it first sent b'SSH-2.0") < 10


def test_a_worker_a_plain_scheduler_over_tls_and_a_tls_scheduler_over_tcp_are_named():
    with LocalCluster(
        n_workers=1, processes=False, protocol="tcp://", host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as plain:
        scheduler = plain.scheduler_address
        worker = next(iter(plain.scheduler_info["workers"]))
        check_scheduler(scheduler)
        refused(worker, rf"a Dask worker answers at {worker}, not a scheduler: its scheduler is {scheduler}")
        refused(scheduler.replace("tcp://", "tls://"), rf"answers at tls://\S+ in plain TCP, not TLS: use {scheduler}")
    security = Security.temporary()
    with LocalCluster(
        n_workers=1,
        processes=False,
        protocol="tls://",
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        security=security,
    ) as tls:
        address = tls.scheduler_address
        check_scheduler(address, context=security.get_connection_args("client")["ssl_context"])
        refused(
            address.replace("tls://", "tcp://"),
            r"a TLS server answers at tcp://\S+: if it is a Dask scheduler "
            r"started with certificates, use tls://",
        )
        others = Security.temporary().get_connection_args("client")["ssl_context"]  # certificates of another CA
        refused(address, "a TLS server answers at tls://", context=others)


def test_connecting_to_a_web_server_fails_fast_and_leaves_nothing_behind(capfd):
    before = set(threading.enumerate())
    with http_server() as address:
        start = time.monotonic()
        with pytest.raises(ClusterError, match=rf"an HTTP server answers at {address}.*; or use cluster='local'"):
            clusters.connect(address)
        assert time.monotonic() - start < 10
    gc.collect()
    assert address not in clusters.remote_addresses()
    assert {t for t in threading.enumerate() if t.is_alive()} - before <= {
        t for t in threading.enumerate() if t.name == "IO loop"
    }
    assert "Traceback" not in capfd.readouterr().err
