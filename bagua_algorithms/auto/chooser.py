"""The impl behind ``algorithm="auto"``: runs the candidates in turn, times their steps, agrees on the
fastest and hands the module over to it (rule and communication: ``bagua_algorithms.auto``)."""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from bagua_algorithms.auto.delegation import DelegatingImpl
from bagua_algorithms.auto.link import describe_bandwidth, measure_link
from bagua_core.api import (
    Algorithm,
    AlgorithmImpl,
    BaguaConfigError,
    Capabilities,
    ReduceOp,
    WrappedModule,
    allreduce_inplace,
    broadcast,
    capabilities_of,
)


__all__ = ["AutoImpl"]

logger = logging.getLogger("bagua.auto")


class AutoImpl(DelegatingImpl):
    """Delegates every hook of the contract to the current candidate's impl (by construction:
    :class:`~bagua_algorithms.auto.delegation.DelegatingImpl`); its ``need_reset`` (asked before every
    forward) drives the schedule, ``init_tensors`` takes the plan for a sharded model, and ``state_dict`` /
    ``load_state_dict`` carry the choice in fault-tolerant mode. Once decided, ``WrappedModule(module).impl`` is the chosen impl; in
    fault-tolerant mode this impl stays and delegates to it, its state holding the choice."""

    hands_module_over = True
    """Read by ``bagua_features.autotune``: this impl hands the module to the chosen impl, which is tuned
    (if its capabilities allow) once it runs the module by itself; this one is never tuned."""

    def __init__(self, process_group: Any, config: Any, plan: Any, sharded_plan: Callable[[], Any] | None = None) -> None:
        """``config``: ``auto``'s options; ``plan``: its candidates for this group's membership
        (``AutoAlgorithm.plan``); ``sharded_plan``: the plan for a model sharded with FSDP2 (taken at the first
        rebuild of a sharded module's buckets, before any trial)."""
        super().__init__(process_group, config)
        self.plan = plan
        self._sharded_plan = sharded_plan
        self.index = 0
        self.current: AlgorithmImpl = plan.declarations[0].reify(process_group)
        self._module: torch.nn.Module | None = None
        self._first_step: int | None = None
        self._last: float | None = None
        self._times: dict[int, list[float]] = {}
        self.keeps_module = plan.fault_tolerance is not None
        """Fault-tolerant mode: this impl runs the module after the choice too (a new quorum re-reifies the
        declaration, which stays ``auto``; :meth:`load_state_dict` switches the new impl to the choice)."""
        self.decided: int | None = None
        """The chosen candidate's index once decided (fault-tolerant mode)."""

    # --- the schedule --------------------------------------------------------------------------
    def need_reset(self) -> bool:
        if self.decided is not None:
            return self.current.need_reset()
        module = self._module
        now = time.perf_counter()
        last, self._last = self._last, now
        counter = WrappedModule(module).train_step_counter
        if self._first_step is None:
            self._first_step = counter
        step = counter - self._first_step  # 0 for the first step trained
        warmup, per_trial, count = self.config.warmup_steps, self.config.trial_steps, len(self.plan.declarations)
        if count == 1:
            return self._decide(module, [float("nan")])
        finished = step - 1 - warmup  # the step that just ended, counted from the first trial's
        if last is not None and finished >= 0 and finished % per_trial > 0 and finished // per_trial < count:
            self._times.setdefault(finished // per_trial, []).append(now - last)
        if step < warmup:
            return self.current.need_reset()
        trial, offset = divmod(step - warmup, per_trial)
        if trial >= count:
            medians = [statistics.median(self._times.get(i) or [float("inf")]) for i in range(count)]
            return self._decide(module, medians)
        if offset == 0 and trial != self.index:
            self._switch(module, trial)
            return True
        return self.current.need_reset()

    def _switch(self, module: torch.nn.Module, index: int) -> None:
        self.current.shutdown(module)
        self.index = index
        declaration = self.plan.declarations[index]
        self.current = declaration.reify(self.process_group)
        WrappedModule(module).switch_algorithm(capabilities=self._capabilities(declaration))
        logger.info("step %d: auto trial of %s", WrappedModule(module).train_step_counter, declaration.name)

    def _capabilities(self, declaration: Algorithm) -> Capabilities:
        """The running candidate's, with auto's own fault tolerance (the runtime's policy never changes)."""
        capabilities = capabilities_of(declaration, self.current)
        if self.keeps_module:
            capabilities = dataclasses.replace(capabilities, fault_tolerance=self.plan.fault_tolerance)
        return capabilities

    def _decide(self, module: torch.nn.Module, medians: list[float]) -> bool:
        comm = self.process_group.get_global_communicator()
        times = torch.tensor(medians, dtype=torch.float64)
        choice = torch.zeros(1, dtype=torch.int64)
        link: dict[str, float] = {}

        wrapped = WrappedModule(module)
        params = [p for _, p in wrapped.named_parameters()]
        device = params[0].device if params else torch.device("cpu")
        model_bytes = sum(p.numel() * p.element_size() for p in params)

        def agree() -> None:
            link.update(measure_link(comm, large_bytes=min(max(model_bytes, 64 << 10), 4 << 20), device=device))
            allreduce_inplace(times, op=ReduceOp.MAX, comm=comm)  # the slowest rank sets the pace
            if comm.rank() == 0:
                choice[0] = int(torch.argmin(torch.nan_to_num(times, nan=0.0)))
            broadcast(choice, src=0, comm=comm)

        self.process_group.worker.submit(agree)
        self.process_group.worker.synchronize()
        best = int(choice[0])
        if best != self.index:
            self._switch(module, best)
        chosen: Algorithm = self.plan.declarations[best]
        result = {
            "algorithm": chosen.name,
            "step_time_s": {d.name: float(t) for d, t in zip(self.plan.declarations, times)},
            "relative_bytes": {d.name: type(d).capabilities.relative_bytes for d in self.plan.declarations},
            "options": dict(self.plan.overrides),  # non-default options of the candidates (single node)
            "model_bytes": model_bytes,
            "decided_at_step": wrapped.train_step_counter,
            **link,
        }
        module.bagua_auto_result = result
        if comm.rank() == 0 and not logger.hasHandlers():  # show the choice unless logging is configured
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        if self.keeps_module:
            self.decided = best
        else:
            # from now on the chosen impl runs the module by itself
            wrapped.switch_algorithm(impl=self.current, declaration=chosen)
        logger.info("auto chose %s at step %d: step time (max over ranks) %s; link latency %.3g ms, bandwidth "
                    "%s; model %.3g MB; declared relative bytes %s; options %s", chosen.name,
                    result["decided_at_step"], {k: round(v, 6) for k, v in result["step_time_s"].items()},
                    link["latency_s"] * 1e3, describe_bandwidth(link), model_bytes / 1e6,
                    result["relative_bytes"], result["options"] or "defaults")
        return True

    # --- what it does besides forwarding ---------------------------------------------------------
    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        if self._module is None:
            self._module = bagua_module
            wrapped = WrappedModule(bagua_module)
            if wrapped.is_sharded and self._sharded_plan is not None:  # the candidates that run on shards
                plan = self._sharded_plan()
                if plan.declarations[0].name != self.plan.declarations[0].name:
                    self.current.shutdown(bagua_module)
                    self.current = plan.declarations[0].reify(self.process_group)
                self.plan = plan
                self.keeps_module = plan.fault_tolerance is not None
            wrapped.switch_algorithm(capabilities=self._capabilities(self.plan.declarations[self.index]))
        return self.current.init_tensors(bagua_module)

    def state_dict(self) -> dict[str, Any]:
        """The running candidate's; in fault-tolerant mode with the choice (what a joiner is healed with)."""
        if not self.keeps_module:
            return self.current.state_dict()
        result = getattr(self._module, "bagua_auto_result", None) if self.decided is not None else None
        return {"index": self.index, "decided": -1 if self.decided is None else self.decided,
                "result": dict(result or {}), "candidate": self.current.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Fault-tolerant mode: run the chosen candidate when ``state`` holds a choice (the module's buckets
        are rebuilt for it), else start the trials again from the first candidate at the next step."""
        if not self.keeps_module:
            self.current.load_state_dict(state)
            return
        module = self._module
        if module is None:
            raise BaguaConfigError("algorithm 'auto': its state can only be loaded into a wrapped module")
        decided = int(state["decided"])
        target = decided if decided >= 0 else 0
        if target != self.index:
            self._switch(module, target)
            WrappedModule(module).reset()
        self.decided = decided if decided >= 0 else None
        if self.decided is None:  # the trials start again: times taken on other replicas compare nothing
            self._first_step, self._last, self._times = None, None, {}
        if int(state["index"]) == self.index:
            self.current.load_state_dict(state["candidate"])
        if self.decided is not None:
            module.bagua_auto_result = dict(state["result"])
