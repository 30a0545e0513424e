"""The notebook's side of work on a Dask cluster: what it submits, the events the work sends back,
and how it is watched until it ends.

A distributed run (:class:`~fragnb.runtime.plane.OnDask`) and a sweep's runs side by side
(:mod:`fragnb.runtime.sweep`) both submit tasks, read the small events those tasks log on a topic of
Dask's event log while they run, take the events still on their way once the tasks have ended, and
answer Ctrl-C in two stages: the first (or the explorer's Stop) asks the work to end after its current
iteration, the second aborts (:class:`~fragnb.runtime.worker.stops.Interrupts`, the rule a ``single``
run follows too). :class:`EventStream` is that, once; what an event means, and when the work has ended,
stays with its caller. Dask is not imported here: the client is handed in.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from .worker.stops import Interrupts

__all__ = ["EventStream"]


class EventStream:
    """Tasks submitted through ``client`` and the events they log on ``topic``, watched until they end.

    Entering it (``with stream:``, or :meth:`open`) subscribes to the topic, leaving it (:meth:`close`)
    unsubscribes; events logged while no one is subscribed are not kept by Dask, so open it before the
    work that sends them is submitted.

    Parameters
    ----------
    client : distributed.Client
        The client the work is submitted through and whose scheduler relays the events.
    topic : str
        The topic of Dask's event log the work's tasks send their events on.

    Attributes
    ----------
    interrupted : bool
        Whether a Ctrl-C (and not a ``stop`` set elsewhere, such as the explorer's Stop) asked the work
        to end: the caller says which in what it reports.
    """

    def __init__(self, client, topic: str):
        self.client, self.topic = client, topic
        self.events: queue.Queue = queue.Queue()
        self.interrupted = False
        self.subscribed = False

    def open(self) -> EventStream:
        """Subscribe to the topic. The client sends this to the scheduler ahead of any task it submits
        after, so the events of work submitted after it all come."""
        if not self.subscribed:
            # Dask's event log hands each event as (time, message): only the message is the work's
            self.client.subscribe_topic(self.topic, lambda event: self.events.put(event[1]))
            self.subscribed = True
        return self

    def close(self) -> None:
        """Unsubscribe, if subscribed (a run that failed before it was watched closes it too)."""
        if self.subscribed:
            self.subscribed = False
            self.client.unsubscribe_topic(self.topic)

    def __enter__(self) -> EventStream:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def submit(self, fn: Callable, *args, where: list[str] | None = None, **kwargs):
        """``fn(*args, **kwargs)`` as a task; its future.

        Parameters
        ----------
        fn : callable
            What the task runs, with ``args`` and ``kwargs`` (which must not use the names of
            ``Client.submit``'s own parameters: ``key``, ``workers``, ``pure``...).
        where : list of str, optional
            The worker addresses it must run on (a replica's, whose state lives there); any worker
            when None.

        Returns
        -------
        distributed.Future
            Never shared with another submission of the same call (``pure=False``): every task here
            has effects.
        """
        pinned = {"workers": where, "allow_other_workers": False} if where is not None else {}
        return self.client.submit(fn, *args, **kwargs, **pinned, pure=False)

    def next(self, timeout: float) -> Any | None:
        """The next event's message, if one arrives within ``timeout`` seconds (none is waited for at 0);
        None if none did."""
        try:
            return self.events.get(timeout=timeout) if timeout > 0 else self.events.get_nowait()
        except queue.Empty:
            return None

    def received(self) -> list:
        """The messages of the events already here, in the order they came, waiting for none."""
        came = []
        while (msg := self.next(0)) is not None:
            came.append(msg)
        return came

    def watch(self, step: Callable[[], bool], ask: Callable[[], None], stop: threading.Event | None = None) -> None:
        """Call ``step`` until it says the work has ended, answering Ctrl-C in two stages.

        Parameters
        ----------
        step : callable
            One round of watching (take events, look at the tasks); True once the work has ended. It
            should return within a fraction of a second, so that a stop is asked for promptly.
        ask : callable
            Asks the work to end after its current iteration; called once, after the round in which a
            first Ctrl-C came or ``stop`` was found set.
        stop : threading.Event, optional
            Set elsewhere (the explorer's Stop) to ask for the same end as a first Ctrl-C; a Ctrl-C
            once it is set aborts.

        Raises
        ------
        KeyboardInterrupt
            A second Ctrl-C: the caller aborts the work (it may be stuck in an iteration that does
            not end).
        """
        interrupts, asked = Interrupts(stop), False
        while True:
            try:
                if step():
                    return
            except KeyboardInterrupt:
                interrupts.interrupt()  # the second one raises: the work is aborted
                self.interrupted = True
            if interrupts.stop.is_set() and not asked:  # Ctrl-C or the explorer's Stop
                asked = True
                ask()

    def drain(self, show: Callable[[Any], None], caught_up: Callable[[], bool] | None = None, timeout: float = 0.0):
        """Show the events still on their way once the work has ended (they travel through the scheduler).

        Parameters
        ----------
        show : callable
            Called with each event's message, in the order they came.
        caught_up : callable, optional
            True once the last event the caller waits for has come.
        timeout : float
            How long to wait for ``caught_up``; at 0, only the events already here are shown.

        Notes
        -----
        A Ctrl-C while draining is ignored: the work has ended, nothing is left to stop.
        """
        deadline = time.monotonic() + timeout
        try:
            while not (caught_up is not None and caught_up()):
                left = deadline - time.monotonic()
                msg = self.next(min(0.05, left))
                if msg is not None:
                    show(msg)
                elif left <= 0:
                    return
        except KeyboardInterrupt:
            pass
