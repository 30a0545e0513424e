"""Channels: values sent from one replica straight to another, never through the scheduler or the notebook.

Every replica reads one inbox and writes to its peers' inboxes. Messages from one peer arrive in
the order it sent them, and every replica walks the same program, so a receiver always knows
whom it waits for and what comes next: ``recv(peer, tag)`` takes the next message from ``peer``
and checks that it is ``tag``. Sends never block.

Two transports with one behaviour:

- :class:`ZmqChannels`: a ZeroMQ PULL socket per replica and PUSH sockets to its peers, over TCP.
  ZeroMQ is what SRL's streams use; on loopback a small message's round trip is a few tens of
  microseconds (``benchmarks/channels.py`` measures it next to Dask's and gloo's).
- :class:`QueueChannels`: in-process queues, for replicas run as threads of one process (the
  safety net's simulation).

Both pickle what they send, so a receiver gets a snapshot of the value as it was when sent.
A wait never hangs: it wakes every 0.2 s to see whether the run was aborted (a peer failed, its
worker was lost, the user interrupted), and raises :class:`ChannelError` naming why.
"""

from __future__ import annotations

import pickle
import queue
import threading
from collections import defaultdict, deque
from typing import Any

__all__ = ["ChannelError", "Channels", "ZmqChannels", "QueueChannels"]

_ABORT = "__abort__"
_POLL_S = 0.2


class ChannelError(RuntimeError):
    """A channel cannot deliver: its peer failed or was lost, or the run was aborted."""


class Channels:
    """One replica's end of the run's channels: ``send`` to a peer, ``recv`` from one.

    Counts bytes sent and seconds spent waiting, for the run's statistics.
    """

    def __init__(self, me: str, abort: threading.Event | None = None):
        self.me = me
        self.aborted = abort or threading.Event()
        self.reason = "the run was aborted"
        self.pending: dict[str, deque] = defaultdict(deque)
        self.bytes_sent = 0
        self.messages_sent = 0
        self.peers: list[str] = []

    def send(self, peers: list[str], tag: str, value: Any) -> None:
        """Send ``value`` to each of ``peers`` (pickled once)."""
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        for peer in peers:
            self._put(peer, tag, data)
            self.bytes_sent += len(data)
            self.messages_sent += 1

    def recv(self, peer: str, tag: str) -> Any:
        """The next message from ``peer``, which must be ``tag``."""
        while not self.pending[peer]:
            if self.aborted.is_set():
                raise ChannelError(f"{self.me}: {self.reason}")
            got = self._next(_POLL_S)
            if got is None:
                continue
            sender, got_tag, data = got
            if got_tag == _ABORT:
                self.reason = pickle.loads(data)
                self.aborted.set()
                continue
            self.pending[sender].append((got_tag, data))
        got_tag, data = self.pending[peer].popleft()
        if got_tag != tag:  # every replica walks the same program: a different message is a bug, not a race
            raise ChannelError(f"{self.me} expected {tag!r} from {peer} and got {got_tag!r}")
        return pickle.loads(data)

    def abort_peers(self, reason: str) -> None:
        """Tell every peer that this replica failed: their waits end with ``reason``."""
        data = pickle.dumps(reason)
        for peer in self.peers:
            try:
                self._put(peer, _ABORT, data)
            except Exception:  # a peer already gone needs no telling
                pass

    def abort(self, reason: str) -> None:
        self.reason = reason
        self.aborted.set()

    # -- transport ------------------------------------------------------------------------------
    def _put(self, peer: str, tag: str, data: bytes) -> None:
        raise NotImplementedError

    def _next(self, timeout: float) -> tuple[str, str, bytes] | None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ZmqChannels(Channels):
    """Channels over ZeroMQ: bind an inbox on ``host``; :meth:`connect` to the peers' inboxes."""

    def __init__(self, me: str, host: str, abort: threading.Event | None = None):
        import zmq

        super().__init__(me, abort)
        self.zmq = zmq
        self.context = zmq.Context.instance()
        self.inbox = self.context.socket(zmq.PULL)
        self.inbox.setsockopt(zmq.RCVHWM, 0)  # never drop or block: a program's sends are bounded by its loop
        self.inbox.setsockopt(zmq.LINGER, 0)
        port = self.inbox.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self.outboxes: dict[str, Any] = {}

    def connect(self, addresses: dict[str, str]) -> None:
        self.peers = sorted(p for p in addresses if p != self.me)
        for peer in self.peers:
            sock = self.context.socket(self.zmq.PUSH)
            sock.setsockopt(self.zmq.SNDHWM, 0)
            sock.setsockopt(self.zmq.LINGER, 2000)  # flush the last messages at close, but never hang on a lost peer
            sock.connect(addresses[peer])
            self.outboxes[peer] = sock

    def _put(self, peer: str, tag: str, data: bytes) -> None:
        self.outboxes[peer].send_multipart([self.me.encode(), tag.encode(), data], copy=len(data) < 65536)

    def _next(self, timeout: float):
        if not self.inbox.poll(int(timeout * 1000)):
            return None
        sender, tag, data = self.inbox.recv_multipart()
        return sender.decode(), tag.decode(), data

    def close(self) -> None:
        for sock in self.outboxes.values():
            sock.close()
        self.inbox.close()
        self.outboxes.clear()


class QueueChannels(Channels):
    """Channels between threads of one process; ``boxes`` is shared by all of a run's replicas."""

    def __init__(self, me: str, boxes: dict[str, queue.Queue], abort: threading.Event):
        super().__init__(me, abort)
        self.boxes = boxes
        self.peers = sorted(p for p in boxes if p != me)

    def _put(self, peer: str, tag: str, data: bytes) -> None:
        self.boxes[peer].put((self.me, tag, data))

    def _next(self, timeout: float):
        try:
            return self.boxes[self.me].get(timeout=timeout)
        except queue.Empty:
            return None

