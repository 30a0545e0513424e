"""Dask's profile sampler paused on a worker while replica programs run there; a cluster that grows slowly says so;
a dropped run leaves a playing replica's sockets to its own thread; a notebook that reads a checkpoint event late takes the newest checkpoint; a worker whose heartbeats stop (a host
cut off) is silent after a bound, and a call waiting on it is watched (`fragnb.runtime.cluster.silence`)."""

import pytest

from fragnb.runtime.cluster import dask_profiler as profiler
from fragnb.runtime.cluster.silence import Silence


class _Sampler:
    def __init__(self):
        self.running = True

    def stop(self):
        self.running = False

    def start(self):
        self.running = True


class _Loop:
    def add_callback(self, fn):  # a worker's loop runs it in its own thread; here, at once
        fn()


class _Worker:
    def __init__(self, callbacks):
        self.periodic_callbacks, self.loop = callbacks, _Loop()


def test_the_sampler_stops_while_any_replica_program_runs_and_starts_after_the_last():
    sampler = _Sampler()
    worker = _Worker({"profile": sampler})
    with profiler.paused(worker):
        assert not sampler.running
        with profiler.paused(worker):  # a second program on the same worker (srl's ring, a many-threaded worker)
            assert not sampler.running
        assert not sampler.running  # the first still runs
    assert sampler.running


def test_a_failing_program_still_starts_the_sampler_again():
    sampler = _Sampler()
    worker = _Worker({"profile": sampler})
    try:
        with profiler.paused(worker):
            raise RuntimeError("the replica failed")
    except RuntimeError:
        pass
    assert sampler.running


def test_a_worker_without_profiling_is_left_alone():
    worker = _Worker({})
    with profiler.paused(worker):
        pass
    assert worker.periodic_callbacks == {}


def test_a_cluster_that_grows_slowly_shows_how_many_workers_are_up(monkeypatch, capsys):
    """Starting workers that take more than a second says how far it has got; too slow a start is an error."""
    import pytest

    from fragnb.runtime.cluster import clusters

    class Cluster:
        def scale(self, n):
            self.target = n

    up = iter([0, 0, 1, 2, 2, 3])
    monkeypatch.setattr(clusters, "workers", lambda client: range(next(up)))
    monkeypatch.setattr(clusters.time, "sleep", lambda s: None)
    clock = iter(range(0, 100))
    monkeypatch.setattr(clusters.time, "monotonic", lambda: float(next(clock)))
    clusters._grow(Cluster(), None, 3)
    err = capsys.readouterr().err
    assert "starting Dask workers" in err and "2/3" in err and "started 3 Dask workers" in err

    monkeypatch.setattr(clusters, "workers", lambda client: range(1))
    with pytest.raises(clusters.ClusterError, match="only 1 of 3 Dask workers started within 5 s"):
        clusters._grow(Cluster(), None, 3, timeout=5)


def test_dropping_a_run_leaves_a_playing_replicas_sockets_to_its_own_thread():
    """A run restarted after a lost worker drops its old replicas from the survivors while their threads may
    still poll their sockets: closing a zmq socket from another thread then aborts the worker process
    (libzmq: `Assertion failed: pfd.revents & POLLIN`), and the restart lost a second, healthy worker."""
    from fragnb.runtime.net.channels import Channels
    from fragnb.runtime.worker import registry
    from fragnb.runtime.worker.replica import Replica

    class Recorded(Channels):
        closed = False

        def close(self):
            self.closed = True

    def held(playing: bool):
        rep = Replica(
            "actors", int(playing), 2, "cpu", {}, {}, channels=Recorded(f"actors[{int(playing)}]"), playing=playing
        )
        registry.add("dropped-run", rep)
        return rep

    playing, waiting = held(True), held(False)
    assert registry.drop_run("dropped-run") == 2
    assert (
        playing.channels.aborted.is_set() and not playing.channels.closed
    )  # its own thread closes them as its waits end
    assert waiting.channels.closed  # no thread of its own yet: closed here
    assert not registry.of_run("dropped-run")


def test_a_notebook_that_reads_a_checkpoint_event_late_takes_the_replicas_newest_checkpoint_once(monkeypatch):
    """A replica holds its two newest checkpoints. A notebook that read 'kept after iteration 2' only once the
    replicas had kept 4 and 6 (a busy machine) asked for 2, found it dropped on every replica, and kept none: a
    worker lost then had the run start again from its beginning, and notebook 05's drill found no checkpoint in
    the notebook. It takes the newest one every replica holds, and reads no older one after it."""
    from fragnb.runtime import attempt
    from fragnb.runtime.attempt import Attempt
    from fragnb.runtime.worker import registry
    from fragnb.runtime.worker.replica import Replica

    monkeypatch.setattr(attempt, "workers", lambda client: {"tcp://w": {}})  # the scheduler lists the worker
    replicas = [Replica("actors", i, 2, "cpu", {}, {}) for i in range(2)]
    for rep in replicas:
        registry.add("late-run", rep)
        for it in (2, 4, 6):
            rep.keep(it, f"{rep.index}@{it}".encode())
    calls = []

    class Client:  # client.run on one worker, here
        def run(self, fn, *args, workers, on_error):
            calls.append(args)
            return {"tcp://w": fn(*args)}

    run = Attempt.__new__(Attempt)
    run.client, run.run_id, run.slots = Client(), "late-run", {"actors[0]": "tcp://w", "actors[1]": "tcp://w"}
    run.reported, run.saved, run.fetch_seconds, run.forsaken, run.script = {}, None, 0.0, [], None
    run.silence = Silence()  # no worker has gone silent
    try:
        for name in run.slots:  # the first event, read after the replicas kept all three (their worker may die next)
            run.kept(name, 2)
        assert run.saved == (6, {"actors[0]": b"0@6", "actors[1]": b"1@6"}) and len(calls) == 1
        for it in (4, 6):  # the others: nothing newer to read
            for name in run.slots:
                run.kept(name, it)
        assert run.saved[0] == 6 and len(calls) == 1
        for rep in replicas:
            rep.keep(8, f"{rep.index}@8".encode())
            assert sorted(rep.checkpoints) == [6, 8]  # the one the notebook read stays until a newer is kept
        for name in run.slots:
            run.kept(name, 8)
        assert run.saved == (8, {"actors[0]": b"0@8", "actors[1]": b"1@8"}) and len(calls) == 2
    finally:
        registry.drop_run("late-run")


def test_a_checkpoint_is_not_asked_of_a_worker_the_scheduler_has_dropped(monkeypatch):
    """Events a dead worker's replicas sent before they died still arrive; asked for a checkpoint, a worker the
    scheduler had already dropped made the notebook wait out Dask's 30 s connect before the run said it lost it."""
    from types import SimpleNamespace

    from fragnb.runtime import attempt
    from fragnb.runtime.attempt import Attempt, LostWorker
    from fragnb.runtime.events import EventStream

    class Client:
        def run(self, fn, *args, workers, on_error):
            raise AssertionError(f"asked {workers} for {fn.__name__}, though no worker is alive")

    monkeypatch.setattr(attempt, "workers", lambda client: {})  # the scheduler lists none: the worker died
    run = Attempt.__new__(Attempt)
    run.client, run.run_id, run.slots = Client(), "dead-run", {"actors[0]": "tcp://w", "learner[0]": "tcp://w"}
    run.reported, run.saved, run.fetch_seconds, run.forsaken, run.lost, run.jobs = {}, None, 0.0, [], [], {}
    run.silence = Silence()
    run.futures, run.stream = {}, EventStream(Client(), "dead-run")
    run.script = SimpleNamespace(transfers=[], mode=SimpleNamespace(goes_on_without=lambda *a: False))
    run.kept("actors[0]", 2)
    with pytest.raises(LostWorker, match="actors\\[0\\], learner\\[0\\] on tcp://w"):
        run.kept("learner[0]", 2)


def test_a_worker_whose_heartbeat_stamp_stops_while_others_move_is_silent_after_the_bound():
    from fragnb.runtime.cluster.silence import SILENT_S

    silence = Silence()
    assert silence.observe(0.0, {"a": 1.0, "b": 1.0}) == {}
    # a's stamp moves every half second (its heartbeats); b's stops at 1.0, as a host cut off does.
    silent = []
    for t in range(1, 25):
        quiet = silence.observe(t / 2, {"a": 1.0 + t / 2, "b": 1.0})
        assert quiet == ({"b": t / 2} if t / 2 > SILENT_S else {}), (t, quiet)
        silent += list(quiet)
    assert silent == ["b"] * 4  # at 10.5, 11, 11.5 and 12 s
    assert silence.observe(12.5, {"a": 20.0, "b": 2.0}) == {}  # b heard again: silent no more
    assert silence.observe(30.0, {"a": 21.0}) == {}  # gone from the scheduler: forgotten here


def test_no_worker_is_silent_while_none_is_heard_and_a_large_clusters_bound_follows_its_heartbeats():
    from fragnb.runtime.cluster.silence import SILENT_S

    silence = Silence()
    silence.observe(0.0, {"a": 1.0, "b": 1.0})
    # A scheduler too busy to read heartbeats stamps none: that is no evidence against any worker.
    assert silence.observe(60.0, {"a": 1.0, "b": 1.0}) == {}
    assert Silence().limit(4) == SILENT_S and Silence().limit(4000) == 4 * (4000 / 200 + 1)
    assert Silence(after=2.0).limit(4) == 2.0


def test_the_silence_bound_is_a_setting_for_hosts_that_pause_longer():
    import dask

    with dask.config.set({"fragnb.silent-after": "45s"}):
        assert Silence().limit(4) == 45.0
        silence = Silence()
        silence.observe(0.0, {"a": 1.0, "b": 1.0})
        assert silence.observe(30.0, {"a": 1.0, "b": 2.0}) == {}  # 30 s without "a": within its bound
        assert set(silence.observe(46.0, {"a": 1.0, "b": 3.0})) == {"a"}
    with dask.config.set({"fragnb.silent-after": 20}):  # seconds, as Dask's own timeouts take them
        assert Silence().limit(4) == 20.0


def test_a_watched_call_returns_its_value_or_error_and_a_check_that_raises_ends_the_wait():
    import threading

    from fragnb.runtime.cluster.silence import waiting

    assert waiting(lambda: 42, lambda: None, 0.01) == 42
    with pytest.raises(KeyError):
        waiting(lambda: {}["x"], lambda: None, 0.01)
    hung, checks = threading.Event(), []

    def check():
        checks.append(1)
        if len(checks) == 3:
            raise TimeoutError("lost")

    with pytest.raises(TimeoutError, match="lost"):
        waiting(hung.wait, check, 0.01)  # a call that never returns: the check ends the wait
    hung.set()
