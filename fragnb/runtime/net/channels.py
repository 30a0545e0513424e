"""Channels: values sent from one replica straight to another, never through the scheduler or the notebook.

Every replica reads one inbox and writes to its peers' inboxes. Messages from one peer arrive in
the order it sent them, and every replica walks the same program, so a receiver always knows
whom it waits for and what comes next: ``recv(peer, tag)`` takes the next message from ``peer``
and checks that it is ``tag``. Sends never block.

Two transports with one behaviour:

- :class:`ZmqChannels`: a ZeroMQ PULL socket per replica and PUSH sockets to its peers (a Unix
  socket on one machine, TCP across machines), as SRL's streams. Between two Dask workers on this
  2-core machine a small message's round trip takes ~0.3 ms, 2x gloo's send/recv and 45x less than a
  Dask task per message (``benchmarks/channels.py``). Chosen over gloo because a wait on a socket can
  be ended (a lost peer is an error within a second, not a hang until a process-group timeout),
  messages are any Python values with no size handshake, and an inbox takes messages from any peer
  as they arrive, which the asynchronous policies need.
- :class:`QueueChannels`: in-process queues, for replicas run as threads of one process (the
  safety net's simulation).

Both pickle what they send (a notebook's own classes and functions by value, as cloudpickle does), so a receiver gets a snapshot of the value as it was when sent. CPU
tensors travel as numpy buffers outside the pickle (protocol 5): unpickling a tensor the default
way goes through ``torch.load`` and costs ~0.2 ms, more than the whole round trip.
A wait never hangs: it wakes every 0.2 s to see whether the run was aborted (a peer failed, its
worker was lost, the user interrupted), and raises :class:`ChannelError` naming why.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import pickle
import queue
import socket
import sys
import threading
import types
import uuid
from collections import defaultdict, deque
from typing import Any

import cloudpickle
import torch

__all__ = ["ChannelError", "Unsendable", "dumps", "loads", "Channels", "ZmqChannels", "QueueChannels", "root_cause"]

_ABORT = "__abort__"
_POLL_S = 0.2
_BIG = 65536  # bytes: larger buffers travel outside the pickle, uncopied


class ChannelError(RuntimeError):
    """A channel cannot deliver: its peer failed or was lost, or the run was aborted."""


class Unsendable(TypeError):
    """A value to send does not pickle (:func:`fragnb.runtime.worker.travel.unsendable` says which part)."""


def root_cause(errors: list[BaseException]) -> BaseException:
    """The error that ended a run of several replicas: the first that is not a ChannelError (a peer's
    wait ended by it), else the first."""
    return next((e for e in errors if not isinstance(e, ChannelError)), errors[0])


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if (
            type(obj) is torch.Tensor
            and obj.device.type == "cpu"
            and not obj.requires_grad
            and obj.dtype != torch.bfloat16
        ):
            return torch.from_numpy, (obj.numpy(),)
        if isinstance(obj, (type, types.FunctionType)) and obj.__module__ == "__main__":
            # a notebook's class (a `Transition` namedtuple) or function: no worker can import it by name
            return cloudpickle.loads, (cloudpickle.dumps(obj),)
        return NotImplemented


def dumps(value: Any) -> list:
    """``value`` as frames: the pickle, then its large buffers (tensors' data), uncopied."""
    buffers: list = []

    def aside(buffer: pickle.PickleBuffer) -> bool:  # small buffers stay in the pickle: fewer frames
        if buffer.raw().nbytes <= _BIG:
            return True
        buffers.append(buffer.raw())
        return False

    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=aside).dump(value)
    return [out.getbuffer(), *buffers]


def loads(frames: list) -> Any:
    # Received frames are read-only, and a receiver may update a tensor in place: one copy each.
    return pickle.loads(frames[0], buffers=[bytearray(f) for f in frames[1:]])


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
        self.arrivals = 0

    def send(self, peers: list[str], tag: str, value: Any) -> None:
        """Send ``value`` to each of ``peers`` (pickled once)."""
        try:
            frames = dumps(value)
        except Exception as e:
            raise Unsendable(f"{type(e).__name__}: {e}") from e
        size = sum(memoryview(f).nbytes for f in frames)
        for peer in peers:
            self._put(peer, tag, frames)
            self.bytes_sent += size
            self.messages_sent += 1

    def recv(self, peer: str, tag: str) -> Any:
        """The next message from ``peer``, which must be ``tag``."""
        while not self.pending[peer]:
            self._fill(_POLL_S)
        _, got_tag, frames = self.pending[peer].popleft()
        if got_tag != tag:  # every replica walks the same program: a different message is a bug, not a race
            raise ChannelError(f"{self.me} expected {tag!r} from {peer} and got {got_tag!r}")
        return loads(frames)

    def take(self, peer: str, tag: str) -> Any:
        """The first message from ``peer`` tagged ``tag``, waiting for it; others stay pending. (Replicas
        that run free of each other send in different orders: see :mod:`fragnb.runtime.worker.free`.)"""
        while (value := self.find(peer, tag.__eq__)) is None:
            self._fill(_POLL_S)
        return value[1]

    def find(self, peer: str, match) -> tuple[str, Any] | None:
        """Remove and return (tag, value) of the first pending message from ``peer`` whose tag
        satisfies ``match``; ``None`` if none has arrived. Never waits."""
        box = self.pending[peer]
        for i, (_, tag, frames) in enumerate(box):
            if match(tag):
                del box[i]
                return tag, loads(frames)
        return None

    def arrived(self, peer: str) -> list[tuple[int, str]]:
        """(arrival number, tag) of each message pending from ``peer``: numbers order arrivals from all peers."""
        return [(seq, tag) for seq, tag, _ in self.pending[peer]]

    def poll(self, timeout: float = 0.0) -> None:
        """Move what has arrived into the pending messages, waiting up to ``timeout`` for a first one."""
        if self._fill(timeout):
            while self._fill(0.0):
                pass

    def _fill(self, timeout: float) -> bool:
        """Take one arrived message into ``pending`` (waiting up to ``timeout``); whether one came.
        An abort, here or from a peer, raises ChannelError."""
        if self.aborted.is_set():
            raise ChannelError(f"{self.me}: {self.reason}")
        got = self._next(timeout)
        if got is None:
            return False
        sender, tag, frames = got
        if tag == _ABORT:
            self.reason = loads(frames)
            self.aborted.set()
            raise ChannelError(f"{self.me}: {self.reason}")
        self.arrivals += 1
        self.pending[sender].append((self.arrivals, tag, frames))
        return True

    def abort_peers(self, reason: str) -> None:
        """Tell every peer that this replica failed: their waits end with ``reason``."""
        frames = dumps(reason)
        for peer in self.peers:
            try:
                self._put(peer, _ABORT, frames)
            except Exception:  # a peer already gone needs no telling
                pass

    def abort(self, reason: str) -> None:
        self.reason = reason
        self.aborted.set()

    # -- transport ------------------------------------------------------------------------------
    def _put(self, peer: str, tag: str, frames: list) -> None:
        raise NotImplementedError

    def _next(self, timeout: float) -> tuple[str, str, list] | None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ZmqChannels(Channels):
    """Channels over ZeroMQ: bind an inbox on ``host`` (TCP) and, for peers on the same machine, on a
    Unix socket (about 40 % less latency on loopback); :meth:`connect` to the peers' inboxes."""

    def __init__(self, me: str, host: str, key: bytes, abort: threading.Event | None = None):
        import zmq

        super().__init__(me, abort)
        self.zmq = zmq
        self.key = key  # the run's secret: a message is unpickled only if signed with it
        self.context = zmq.Context.instance()
        self.inbox = self.context.socket(zmq.PULL)
        self.inbox.setsockopt(zmq.RCVHWM, 0)  # never drop or block: a program's sends are bounded by its loop
        self.inbox.setsockopt(zmq.LINGER, 0)
        self.inbox.setsockopt(zmq.RCVTIMEO, int(_POLL_S * 1000))
        port = self.inbox.bind_to_random_port(f"tcp://{host}")
        self.address = {"tcp": f"tcp://{host}:{port}", "machine": _machine()}
        if sys.platform == "linux":  # an abstract Unix socket: no file to leave behind if the process is killed
            self.address["ipc"] = f"ipc://@fragnb-{uuid.uuid4().hex}"
            self.inbox.bind(self.address["ipc"])
        self.outboxes: dict[str, Any] = {}

    def connect(self, addresses: dict[str, dict]) -> None:
        self.peers = sorted(p for p in addresses if p != self.me)
        for peer in self.peers:
            sock = self.context.socket(self.zmq.PUSH)
            sock.setsockopt(self.zmq.SNDHWM, 0)
            sock.setsockopt(self.zmq.LINGER, 2000)  # flush the last messages at close, but never hang on a lost peer
            address = addresses[peer]
            sock.connect(address["ipc"] if "ipc" in address and address["machine"] == _machine() else address["tcp"])
            self.outboxes[peer] = sock

    def _put(self, peer: str, tag: str, frames: list) -> None:
        # One part for the header, the signature and the pickle, then one per large buffer (sent
        # without copies): a small message is one call into zmq, and its receiver needs no flags to
        # tell which parts to take without copying.
        header = f"{self.me}\0{tag}".encode()
        first = b"".join((len(header).to_bytes(2, "big"), header, self._sign(header, frames[0]), frames[0]))
        sock = self.outboxes[peer]
        sock.send(first, self.zmq.SNDMORE if len(frames) > 1 else 0)
        for i, f in enumerate(frames[1:], 2):
            sock.send(f, self.zmq.SNDMORE if i < len(frames) else 0, copy=False)

    def _next(self, timeout: float):
        try:  # the socket's receive timeout is the poll interval (cheaper than a Poller per call)
            first = self.inbox.recv(self.zmq.NOBLOCK if timeout == 0 else 0)
        except self.zmq.Again:
            return None
        big = []
        while self.inbox.getsockopt(self.zmq.RCVMORE):
            big.append(self.inbox.recv(copy=False).buffer)
        size = int.from_bytes(first[:2], "big")
        header, signature, pickled = first[2 : 2 + size], first[2 + size : 18 + size], memoryview(first)[18 + size :]
        # Anyone on this machine can reach the inbox: only a message signed with the run's key, which
        # only the notebook and the run's replicas know, is unpickled. Others are dropped unread.
        if len(first) < 18 + size or not hmac.compare_digest(signature, self._sign(header, pickled)):
            return None
        sender, _, tag = header.decode("utf-8", "replace").partition("\0")
        return sender, tag, [pickled, *big]

    def _sign(self, header: bytes, pickled) -> bytes:
        digest = hashlib.blake2b(header, key=self.key, digest_size=16)
        digest.update(pickled)
        return digest.digest()

    def close(self) -> None:
        for sock in self.outboxes.values():
            sock.close()
        self.inbox.close()  # closing twice is harmless
        self.outboxes.clear()


def _machine() -> str:
    """Where an abstract Unix socket of this process can be reached: host name, boot id and network
    namespace (abstract sockets live in one; containers on one host may share a name and a boot id)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        net = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        boot, net = "", 0
    return f"{socket.gethostname()}/{boot}/{net}"


class QueueChannels(Channels):
    """Channels between threads of one process; ``boxes`` is shared by all of a run's replicas."""

    def __init__(self, me: str, boxes: dict[str, queue.Queue], abort: threading.Event):
        super().__init__(me, abort)
        self.boxes = boxes
        self.peers = sorted(p for p in boxes if p != me)

    def _put(self, peer: str, tag: str, frames: list) -> None:
        self.boxes[peer].put((self.me, tag, [bytes(f) for f in frames]))

    def _next(self, timeout: float):
        try:
            return self.boxes[self.me].get(timeout=timeout) if timeout else self.boxes[self.me].get_nowait()
        except queue.Empty:
            return None
