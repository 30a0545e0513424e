"""The replica's program, as it runs in a worker (or a thread of the safety net).

``replica`` holds one replica's namespace and bookkeeping (``ReplicaState``, what its walker takes),
``entry`` the functions Dask calls on a worker, ``registry`` the replicas a worker holds, ``ledger``
a run's episodes and env steps; ``walker`` walks the Script in step with every replica, ``free``
the decoupled policies' free-running walk;
``machine`` holds their decisions as pure functions of plain values; ``edges`` combines what
several replicas send, ``payload`` is what a group receives before the run, ``travel`` names what
cannot be sent; ``generators`` and ``timing`` keep a replica's random states and its timeline.
"""
