"""``async``: asynchronous model averaging by a background thread, no waiting in the training loop.

During the first ``warmup_steps`` steps: plain gradient allreduce (AVG, full precision: the core's warmup,
``AlgorithmImpl.warming_up``). After it, a
background thread every ``sync_interval_ms`` snapshots the weights, allreduces the snapshot (SUM, in
the weights' dtype, on a torch process group of its own) and under the weight lock applies
``x += reduced / n - snapshot``, keeping the local progress made since the snapshot
(:mod:`bagua_algorithms.async_model_average.averager`). The training thread holds the weight lock from the
forward pre-hook until its optimizers have stepped (until the end of backward when it has none), so
an averaging update never interleaves with an optimizer update; an update that finished meanwhile is
applied at the next forward. ``weighting="samples"`` weights each rank's snapshot by its throughput ``rho_r``, the
samples it trained on since the averaging began per round it took part in (one more allreduce of a float64 per
round): ``x += sum_r rho_r x_r / sum_r rho_r - snapshot``, so a faster rank's weights count for the data behind
them.

``module.bagua_algorithm.abort(module)`` stops the averaging; it returns once every rank has
called it (ranks may run different numbers of steps: a rank that aborted keeps joining the rounds
until all have). ``resume(module)`` restarts it. Call ``abort`` on every rank before the process
group is destroyed; the thread is a daemon, and an ``atexit`` handler stops it locally, so it never
blocks interpreter exit.

Fault-tolerant mode (``Capabilities.fault_tolerance``): the rounds run on the quorum's group between replicas
(``process_group.membership.between_replicas``), only
inside a training step of every replica: at the end of each step the runtime stops them
(``quiesce``: the next round's stop flag ends every replica's loop, with no averaging in that round) before
the step's commit decision and before the next quorum may reconfigure the group, and the next forward starts
them again, ``sync_interval_ms`` after the last round. A round whose collectives failed (a replica killed or
hung in it) is dropped before anything of it is applied and fails the step; the failed step is then committed
nowhere: every survivor restores the weights, optimizer state and step counter it had when the step began,
so the rounds applied during that step are undone with it. A joiner heals weights, optimizer state and step
from a live peer (the phase, warmup or averaging, follows from the step) and the next quorum's rounds divide
by its replicas. ``abort``/``resume`` are not for that mode (the runtime starts and stops the rounds).

The package: :mod:`.config` (the options), :mod:`.algorithm` (Algorithm and Impl), :mod:`.averager`
(the background loop).

Example::

    >>> model = model.with_bagua([optimizer], AsyncModelAverageAlgorithm(sync_interval_ms=100))
    >>> for x, y in loader: ...                   # train as usual, any number of steps per rank
    >>> model.bagua_algorithm.abort(model)        # all ranks end with the same averaged weights
"""
from __future__ import annotations

from bagua_algorithms.async_model_average.algorithm import AsyncModelAverageAlgorithm, AsyncModelAverageAlgorithmImpl
from bagua_algorithms.async_model_average.averager import AsyncModelAverager
from bagua_algorithms.async_model_average.config import AsyncModelAverageConfig
from bagua_core.api import Algorithm, hookimpl

__all__ = ["AsyncModelAverageAlgorithm", "AsyncModelAverageAlgorithmImpl", "AsyncModelAverageConfig",
           "AsyncModelAverager"]


@hookimpl
def bagua_register_algorithms() -> list[type[Algorithm]]:
    return [AsyncModelAverageAlgorithm]
