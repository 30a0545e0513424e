"""What answers at a scheduler address, asked with plain sockets before a Dask client is made.

A ``distributed.Client`` pointed at something that is not a Dask scheduler can wait forever: its
handshake reads with no time limit, and an HTTP server (a Jupyter server, a Dask dashboard) never
answers a request it has not finished receiving. A failed client also prints a traceback when it is
collected. So fragnb looks first, within a few seconds, and names what it found.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from concurrent.futures import ThreadPoolExecutor

__all__ = ["ProbeError", "check_scheduler", "serves_page"]

HANDSHAKE_KEY = b"pickle-protocol"  # in every handshake a Dask comm writes (Comm.handshake_info)


class ProbeError(RuntimeError):
    """Nothing, or something other than a Dask scheduler, answers at the address."""


def check_scheduler(address: str, timeout: float = 8.0, context: ssl.SSLContext | None = None) -> None:
    """Return if a Dask listener answers at ``address`` (``tcp://`` or ``tls://host:port``) in the way
    its scheme says (over TLS with ``context``, the client's certificates); else raise
    :class:`ProbeError` saying what answered, within about ``timeout`` s."""
    scheme, _, location = address.partition("://")
    host, port = _host_port(location, address)
    deadline = time.monotonic() + timeout
    with _connect(host, port, address, deadline) as sock:
        # A Dask listener writes its handshake as soon as it accepts, over plain TCP; a TLS server
        # and an HTTP server wait for the client to speak first. A scheduler whose machine is busy with a
        # run took over a second (a detached run's, 2026-12-06): a silent listener is one after 3 s.
        first = _read(sock, min(3.0, _left(deadline)))
    if _is_dask(first):
        if scheme == "tls":
            raise ProbeError(f"a Dask listener answers at {address} in plain TCP, not TLS: use tcp://{location}")
        return _is_scheduler(address, None, deadline)
    if first:
        raise ProbeError(
            f"something answers at {address}, and not as a Dask scheduler does (it first sent {first[:24]!r})"
        )
    tls = _tls(host, port, deadline, context if scheme == "tls" else None)
    if tls == "dask" and scheme == "tls":
        return _is_scheduler(address, context, deadline)
    if tls and scheme == "tcp":
        raise ProbeError(
            f"a TLS server answers at {address}: if it is a Dask scheduler started with certificates, "
            f"use tls://{location} with them (distributed.comm.tls.* in Dask's configuration)"
        )
    if tls and tls != "tls":
        raise ProbeError(
            f"a TLS server answers at {address} and refuses the handshake ({tls}): are "
            "distributed.comm.tls.ca-file, .client.cert and .client.key the scheduler's?"
        )
    status = _http_status(host, port, deadline)
    if status:
        raise ProbeError(
            f"an HTTP server answers at {address} ({status!r}), not a Dask scheduler: a Jupyter server or "
            "a Dask dashboard? A scheduler's address is the one `dask scheduler` prints as "
            "'Scheduler at: tcp://...' (port 8786 by default)"
        )
    if tls:
        raise ProbeError(
            f"a TLS server answers at {address} and says nothing a Dask scheduler says to the certificates "
            "offered (distributed.comm.tls.*): a scheduler that expects other certificates, or not a scheduler"
        )
    raise ProbeError(
        f"something listens at {address} and answers neither as a Dask scheduler, a TLS server nor an HTTP server does"
    )


def serves_page(host: str, port: int, path: str = "/status", timeout: float = 10.0) -> bool:
    """Whether a web page answers (200) at ``http://host:port/path``, asked directly (never through an
    ``http_proxy``): a Dask dashboard, where a scheduler lists a "dashboard" port."""
    import urllib.request

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(f"http://{host}:{port}{path}", timeout=timeout) as page:
            return page.status == 200
    except OSError:  # nothing there, or an error page
        return False


def _is_scheduler(address: str, context: ssl.SSLContext | None, deadline: float) -> None:
    """Ask the Dask listener what it is: a worker's or a nanny's address is an easy mistake, and a
    Client made with one fails, leaving a traceback for when it is collected."""
    from distributed.core import rpc

    async def identity():
        async with rpc(
            address, timeout=_left(deadline), connection_args={"ssl_context": context} if context else {}
        ) as remote:
            return await remote.identity()

    with ThreadPoolExecutor(1) as pool:  # its own event loop: a notebook's thread already runs one
        try:
            found = pool.submit(asyncio.run, identity()).result(_left(deadline) + 1)
        except Exception as e:
            raise ProbeError(
                f"a Dask listener answers at {address} and does not say what it is ({type(e).__name__}: {e})"
            ) from None
    kind = found.get("type")
    if kind != "Scheduler":
        at = f": its scheduler is {found['scheduler']}" if found.get("scheduler") else ""
        raise ProbeError(f"a Dask {str(kind).lower()} answers at {address}, not a scheduler{at}")


def _host_port(location: str, address: str) -> tuple[str, int]:
    host, sep, port = location.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ProbeError(f"{address} is not an address of the form tcp://host:port or tls://host:port")
    return host.strip("[]"), int(port)


def _left(deadline: float) -> float:
    return max(0.05, deadline - time.monotonic())


def _connect(host: str, port: int, address: str, deadline: float) -> socket.socket:
    try:
        return socket.create_connection((host, port), timeout=min(3.0, _left(deadline)))
    except socket.gaierror as e:
        raise ProbeError(f"{address}: no host named {host!r} is known here ({e.strerror})") from None
    except ConnectionRefusedError:
        raise ProbeError(
            f"nothing listens at {address} (connection refused): is the scheduler running, and on "
            "this port? `dask scheduler` prints its address as 'Scheduler at: tcp://...'"
        ) from None
    except TimeoutError:
        raise ProbeError(f"nothing answers at {address} within 3 s (a host that is down, or a firewall)") from None
    except OSError as e:
        raise ProbeError(f"cannot reach {address}: {e.strerror or e}") from None


def _read(sock: socket.socket, seconds: float) -> bytes:
    """What the peer sends within ``seconds``, up to its first message."""
    sock.settimeout(seconds)
    end, data = time.monotonic() + seconds, b""
    try:
        while time.monotonic() < end and len(data) < 4096:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
            if _is_dask(data):
                break
            sock.settimeout(max(0.05, end - time.monotonic()))
    except (TimeoutError, OSError):
        pass
    return data


def _is_dask(data: bytes) -> bool:
    """A Dask TCP message: its length as 8 little-endian bytes, then a msgpack'd handshake."""
    if len(data) < 8:
        return False
    (length,) = struct.unpack("<Q", data[:8])
    return 0 < length < 1 << 20 and HANDSHAKE_KEY in data[8 : 8 + length]


def _tls(host: str, port: int, deadline: float, context: ssl.SSLContext | None) -> str:
    """ "dask" if a Dask listener answers over TLS with ``context``; "tls" if a TLS server completes the
    handshake (without ``context``: no certificate is offered or checked) and says nothing Dask says;
    the reason a TLS server refused the handshake; "" if nothing speaks TLS there."""
    if context is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # only asking whether it speaks TLS
    try:
        with socket.create_connection((host, port), timeout=min(2.0, _left(deadline))) as raw:
            with context.wrap_socket(raw, server_hostname=host) as sock:
                return "dask" if _is_dask(_read(sock, min(1.0, _left(deadline)))) else "tls"
    except ssl.SSLCertVerificationError as e:
        return f"the scheduler's certificate: {e.verify_message}"
    except ssl.SSLError as e:
        reason = e.reason or str(e)
        return reason if "ALERT" in reason.upper() else ""  # an alert is TLS speaking; else it was not TLS at all
    except OSError:
        return ""


def _http_status(host: str, port: int, deadline: float) -> str:
    try:
        with socket.create_connection((host, port), timeout=min(2.0, _left(deadline))) as sock:
            sock.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            reply = _read(sock, min(2.0, _left(deadline)))
    except OSError:
        return ""
    line = reply.split(b"\r\n", 1)[0]
    return line.decode("latin-1") if line.startswith(b"HTTP/") else ""
