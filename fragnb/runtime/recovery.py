"""Recovery: what a distributed run does when an attempt at it fails, in one place.

An attempt (:class:`~fragnb.runtime.attempt.Attempt`) detects a lost worker: its watch asks the scheduler
which of its replicas' workers are gone and raises :class:`~fragnb.runtime.attempt.LostWorker`, or goes on
without an actor where the mode can (:meth:`~fragnb.policies.modes.Mode.goes_on_without`). Then
:meth:`Recovery.after` decides, here:

1. **End the attempt.** Every replica is aborted; the processes of a cluster fragnb owns are shut down (a
   replica may be stuck in a collective or the user's own code), a remote cluster's are only forgotten.
   Its last checkpoint (the state of every replica after some iteration, fetched into the notebook as the
   run went) is kept.
2. **Decide.** A lost worker, where the mode keeps checkpoints and restarts are left
   (:meth:`~fragnb.policies.modes.Mode.restarts`), starts the run again on fresh workers from that
   checkpoint, or from its beginning (every random draw is counter-based: it ends with the uninterrupted
   run's weights). Anything else ends the run: the cell's own error (which ``fragnb.debug()`` can replay),
   a cluster that cannot go on, an interrupt.
3. **Resume or say why not.** A restart hands the checkpoint to the next attempt (:attr:`saved`), which
   waits for workers to replace the lost one (:attr:`wait_s`). A run that cannot go on says why in its
   error, and the notebook takes the last checkpoint where the cluster failed: plain Python's state after
   that many iterations.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from . import replay
from .attempt import LostWorker
from .cluster.clusters import ClusterError, shutdown
from .merge import checkpoint_finals, merge

__all__ = ["Recovery"]


@dataclass
class Recovery:
    """A run's recovery across its attempts: what it lost and what it kept; ``restarts`` at the most."""

    job: object
    restarts: int
    #: why each restart happened, and where it resumed from
    lost: list[str] = field(default_factory=list)
    #: the last checkpoint: (iteration, the pickled state of each replica by name); None before the first
    saved: tuple[int, dict[str, bytes]] | None = None
    #: the seconds the notebook spent fetching checkpoints in attempts that failed
    fetch_seconds: float = 0.0
    #: whether its first attempt waits for workers too (a detached run's conductor started again: its worker died)
    patient: bool = False
    #: whether a run that cannot go on loads its last checkpoint into ``job.namespace`` (False: not the notebook's)
    keeps: bool = True

    @property
    def wait_s(self) -> float:
        """How long the next attempt waits for workers to come up: a restarted run's replace a lost one."""
        return 30.0 if self.lost or self.patient else 0.0

    def after(self, attempt, owned: bool, error: BaseException) -> bool:
        """End the failed ``attempt`` (None if it never started; ``owned``: its cluster is fragnb's own) and
        decide: True to start again from :attr:`saved`; False where the run ends with ``error``, whose
        notes then say why (the caller raises it)."""
        if attempt is not None:
            self.saved, self.fetch_seconds = attempt.saved, self.fetch_seconds + attempt.fetch_seconds
            attempt.abort(f"the run stopped: {type(error).__name__}")
            if owned:
                shutdown()  # a replica may be stuck in a collective or the user's own code: end its process
            else:
                attempt.forget()
        mode = self.job.script.mode
        if isinstance(error, LostWorker) and mode.restarts(len(self.lost), self.restarts):
            where = f"the checkpoint after iteration {self.saved[0]}" if self.saved else "its beginning"
            self.lost.append(f"{error}; resumed from {where}")
            print(
                f"fragnb: {error}. The run starts again from {where} on fresh workers "
                f"(restart {len(self.lost)} of at most {self.restarts}); the notebook is as it was before the run",
                file=sys.stderr,
            )
            return True
        if isinstance(error, LostWorker):  # what happened, then what the run does next
            error.add_note(f"The run stops: {mode.why_it_stops(self.restarts)}")
        if self.saved and self.keeps and isinstance(error, ClusterError):  # it cannot go on: keep what it had done
            self._keep_checkpoint(error)
        if (
            isinstance(error, Exception)
            and not isinstance(error, (LostWorker, ClusterError))
            and getattr(error, "__notes__", None)
        ):
            replay.keep(self.job, self.saved, error)  # the cell's code raised on a replica: fragnb.debug() replays it
        return False

    def _keep_checkpoint(self, error: BaseException) -> None:
        """Load the last checkpoint into the notebook, and say so in ``error`` (or why it could not)."""
        iteration, blobs = self.saved
        try:
            merge(self.job.namespace, self.job.script, checkpoint_finals(self.job.script, blobs), self.job.logs)
            error.add_note(
                f"The notebook now holds the state after iteration {iteration} (the last checkpoint), "
                f"as plain Python would after {iteration} iterations."
            )
        except Exception as failed:  # e.g. GPU tensors in a notebook without a GPU
            error.add_note(
                f"The last checkpoint (after iteration {iteration}) could not be loaded here "
                f"({type(failed).__name__}: {failed}); the notebook is as it was before the run."
            )
