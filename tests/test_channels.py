"""Channels between replicas: order, snapshots, tensors of every kind, and waits that end."""

import queue
import threading
import time

import pytest
import torch

from fragnb.runtime.net.channels import ChannelError, QueueChannels, ZmqChannels, dumps, loads

KEY = b"k" * 32


@pytest.fixture(params=["zmq", "queue"])
def pair(request):
    """Two connected channel ends, ``a`` and ``b``."""
    if request.param == "zmq":
        a, b = ZmqChannels("a[0]", "127.0.0.1", KEY), ZmqChannels("b[0]", "127.0.0.1", KEY)
        addresses = {"a[0]": a.address, "b[0]": b.address}
        a.connect(addresses)
        b.connect(addresses)
    else:
        boxes, abort = {"a[0]": queue.Queue(), "b[0]": queue.Queue()}, threading.Event()
        a, b = QueueChannels("a[0]", boxes, abort), QueueChannels("b[0]", boxes, threading.Event())
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize(
    "value",
    [
        torch.arange(12.0).reshape(3, 4),
        torch.arange(12.0).reshape(3, 4).t(),  # not contiguous
        torch.randn(300_000),  # large: its buffer travels outside the pickle
        torch.ones(3, dtype=torch.bfloat16),  # no numpy dtype: pickled the default way
        torch.zeros(2, requires_grad=True),
        {"obs": torch.zeros(4, 2, dtype=torch.uint8), "steps": [1, 2.5, "x"], "nested": (torch.tensor(True), None)},
    ],
)
def test_values_arrive_equal(value):
    back = loads([bytes(f) for f in dumps(value)])
    if isinstance(value, dict):
        assert (
            torch.equal(back["obs"], value["obs"])
            and back["steps"] == value["steps"]
            and torch.equal(back["nested"][0], value["nested"][0])
        )
    else:
        assert (
            back.dtype == value.dtype
            and torch.equal(back.detach(), value.detach())
            and back.requires_grad == value.requires_grad
        )


def test_messages_arrive_in_order_and_as_sent(pair):
    a, b = pair
    x = torch.zeros(3)
    a.send(["b[0]"], "first", x)
    x += 1  # the receiver gets the value as it was when sent
    a.send(["b[0]"], "second", {"x": x, "big": torch.ones(100_000)})
    assert torch.equal(b.recv("a[0]", "first"), torch.zeros(3))
    second = b.recv("a[0]", "second")
    assert torch.equal(second["x"], torch.ones(3)) and second["big"].sum() == 100_000
    assert a.bytes_sent > 400_000 and a.messages_sent == 2


def test_a_message_out_of_program_order_is_an_error_not_a_wrong_value(pair):
    a, b = pair
    a.send(["b[0]"], "segment:3", 1)
    with pytest.raises(ChannelError, match="expected 'segment:2' from a\\[0\\] and got 'segment:3'"):
        b.recv("a[0]", "segment:2")


def test_a_failed_peer_ends_the_wait_with_its_reason(pair):
    a, b = pair
    start = time.monotonic()
    threading.Timer(0.3, a.abort_peers, args=("replica a[0] failed: ValueError: boom",)).start()
    with pytest.raises(ChannelError, match="b\\[0\\]: replica a\\[0\\] failed: ValueError: boom"):
        b.recv("a[0]", "segment:0")
    assert time.monotonic() - start < 2


def test_an_abort_from_the_control_plane_ends_a_wait_within_the_poll_interval(pair):
    _, b = pair
    threading.Timer(0.2, b.abort, args=("lost the worker of replica a[0]",)).start()
    start = time.monotonic()
    with pytest.raises(ChannelError, match="lost the worker of replica a\\[0\\]"):
        b.recv("a[0]", "segment:0")
    assert time.monotonic() - start < 1.5


def test_an_inbox_drops_messages_not_signed_with_the_runs_key():
    import pickle

    import zmq

    a, b = ZmqChannels("a[0]", "127.0.0.1", KEY), ZmqChannels("b[0]", "127.0.0.1", KEY)
    intruder = ZmqChannels("a[0]", "127.0.0.1", b"x" * 32)  # another user on the machine, posing as a peer
    addresses = {"a[0]": a.address, "b[0]": b.address}
    for end in (a, b, intruder):
        end.connect(addresses)
    raw = zmq.Context.instance().socket(zmq.PUSH)
    raw.connect(b.address["tcp"])

    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled')",))

    try:
        raw.send_multipart([b"a[0]\0t\00", b"0" * 16, pickle.dumps(Boom())])  # forged signature
        raw.send_multipart([b"garbage"])  # not even one of ours
        intruder.send(["b[0]"], "t", Boom())  # signed, with the wrong key
        a.send(["b[0]"], "t", "from a")
        assert b.recv("a[0]", "t") == "from a"  # the others were dropped unread
    finally:
        raw.close()
        for end in (a, b, intruder):
            end.close()
