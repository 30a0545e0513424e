"""Dask's profile sampler paused on a worker while replica programs run there; a cluster that grows slowly says so;
a dropped run leaves a playing replica's sockets to its own thread."""

from fragnb.runtime.cluster import dask_profiler as profiler


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
