"""The field's DiLoCo as a peer of the LM benchmark: torchft 0.2.0's ``DiLoCo`` and Streaming DiLoCo.

Driven the way torchft's own examples drive it: a lighthouse (``torchft.coordination.LighthouseServer``, in
rank 0's process, bound to the first emulated host's address or loopback), one ``torchft.Manager`` per rank
with torchft's reconfigurable ``ProcessGroupGloo``, each emulated host one replica group (its ranks are the
Manager's group ranks; each host's local rank 0 serves the group's ``TCPStore``, which, like the job's own
store, listens on the host's interfaces: the emulated host's, or the machine's on loopback).
The Manager takes a lighthouse quorum before each exchange (``use_async_quorum=False``, as torchft's DiLoCo
requires) with every host in it (``min_replica_size`` = hosts: no exchange without a replica).

What travels: every ``inner_steps`` steps each fragment's fp32 pseudo-gradient (``x_global - x_local``),
allreduced by the Manager over torchft's gloo group between the same rank of every host (per tensor, or in one
bucket with ``use_bucketization``: the benchmark's methods use it, torchft's fastest form), then an
outer SGD step (lr 0.7, momentum 0.9, Nesterov: bagua's ``diloco`` settings) on it; plus the quorum's RPCs
to the lighthouse and the commit vote. Streaming (``fragments`` > 1): torchft requires ``inner_steps`` to be
a multiple of ``fragments``; a fragment's exchange starts ``fragment_sync_delay`` steps before its turn and
the outer result is mixed in as ``x = alpha * x_local + (1 - alpha) * x_outer``
(``fragment_update_alpha``, bagua's ``mixing``). The fragments are bagua's own partition of the
parameters (:func:`bagua_algorithms.diloco.fragments.split_fragments`), so both stream the same tensors.
torchft's 8-bit quantisation of the exchange needs Triton on a GPU: on CPU it sends fp32.

With FSDP2 inside each host (``--ranks-per-host``), torchft's HSDP path: the model is sharded over the
host's ranks only and each rank's Manager exchanges its local shards with the same rank of the other hosts.

Workarounds kept here: torchft's Manager starts its server on every interface (``[::]:port``); the peer
builds it with the host's own address instead (:func:`_manager_server_on`). The lighthouse's ``address()``
names the machine's hostname, which an emulated host cannot reach: the Managers get the host's address and
the lighthouse's port.

Example::

    >>> peer = TorchftDiLoCo(model, inner_optimizer, {"inner_steps": 25}, host=0, hosts=2, local_rank=0,
    ...                      ranks_per_host=1)
    >>> ...  # train: every inner_optimizer.step() may end in an exchange
    >>> peer.close()
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

__all__ = ["TORCHFT_DILOCO", "TorchftDiLoCoOptions", "TorchftDiLoCo", "host_address"]

TORCHFT_DILOCO = "torchft_diloco"
"""The method (an algorithm name of the benchmark's own) whose options are :class:`TorchftDiLoCoOptions`."""


class TorchftDiLoCoOptions(BaseModel):
    """The options of the ``torchft_diloco`` method (bagua's ``diloco`` defaults for the outer optimizer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inner_steps: StrictInt = Field(25, ge=1)
    """torchft's ``sync_every``: inner steps between two exchanges of a fragment."""
    fragments: StrictInt = Field(1, ge=1)
    """Streaming DiLoCo's fragment count (1: DiLoCo); ``inner_steps`` must be a multiple of it."""
    fragment_sync_delay: StrictInt = Field(0, ge=0)
    """Inner steps a fragment's exchange travels before its outer step (Streaming DiLoCo's tau)."""
    fragment_update_alpha: float = Field(0.0, ge=0, le=1)
    """Weight of the local parameters when a fragment's outer result is mixed in (0: replaced)."""
    use_bucketization: bool = False
    """torchft's ``use_bucketization``: a fragment's pseudo-gradients in one allreduce instead of one per tensor
    (torchft's default), which costs a round trip per tensor on a slow link."""
    outer_lr: float = Field(0.7, gt=0)
    outer_momentum: float = Field(0.9, ge=0, lt=1)
    nesterov: bool = True
    timeout_s: float = Field(300.0, gt=0)
    """The Manager's timeout for collectives, RPCs and the quorum."""

    @model_validator(mode="after")
    def _torchft_schedule(self) -> TorchftDiLoCoOptions:
        if self.inner_steps % self.fragments:
            raise ValueError(f"inner_steps ({self.inner_steps}) must be a multiple of fragments ({self.fragments}): "
                             f"torchft's Streaming DiLoCo syncs one fragment every inner_steps / fragments steps; "
                             f"use e.g. inner_steps={self.inner_steps + self.fragments - self.inner_steps % self.fragments}")
        if self.fragment_sync_delay >= self.inner_steps // self.fragments:
            raise ValueError(f"fragment_sync_delay ({self.fragment_sync_delay}) must be smaller than inner_steps / "
                             f"fragments ({self.inner_steps // self.fragments}): a fragment's exchange must land "
                             "before the next one starts")
        return self

    @classmethod
    def parse(cls, options: dict[str, Any] | None) -> TorchftDiLoCoOptions:
        """Validated options; the error names each field and what is wrong with it."""
        try:
            return cls(**(options or {}))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'options'}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"{TORCHFT_DILOCO} options: {problems}") from None


def host_address(iface: str) -> str:
    """This host's address towards the job's master (its emulated host's eth0, or loopback)."""
    from bagua_features.fault_tolerance.options import address_towards

    if iface == "lo":
        return "127.0.0.1"
    return address_towards(f"http://{os.environ['MASTER_ADDR']}")


@contextlib.contextmanager
def _manager_server_on(host: str) -> Iterator[None]:
    """While a Manager is built, its server listens on ``host`` only (torchft binds ``[::]:port``)."""
    import torchft.manager as ft_manager

    serve = ft_manager.ManagerServer

    def bound(*args: Any, bind: str, **kwargs: Any) -> Any:
        return serve(*args, bind=f"{host}:{bind.rsplit(':', 1)[1]}", **kwargs)

    ft_manager.ManagerServer = bound
    try:
        yield
    finally:
        ft_manager.ManagerServer = serve


class _Fragment(torch.nn.Module):
    """A model fragment for torchft: the same Parameter objects as the model's, registered under their names."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]]) -> None:
        super().__init__()
        for name, param in named:
            self.register_parameter(name.replace(".", "_"), param)


def _fragments(model: torch.nn.Module, count: int) -> list[torch.nn.Module]:
    if count == 1:
        return [model]
    from bagua_algorithms.diloco.fragments import split_fragments

    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [_Fragment([named[i] for i in indices]) for indices in split_fragments([p for _, p in named], count)]


class TorchftDiLoCo:
    """torchft's lighthouse (rank 0), this rank's Manager and its DiLoCo around ``inner_optimizer``
    (collective: every rank of the job builds one). :meth:`close` takes it all down (collective too)."""

    def __init__(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer, options: dict[str, Any] | None,
                 host: int, hosts: int, local_rank: int, ranks_per_host: int, iface: str = "lo") -> None:
        self.options = TorchftDiLoCoOptions.parse(options)
        os.environ.setdefault("RUST_LOG", "warn")  # torchft's Rust side logs every quorum at info level
        from torchft import Manager, ProcessGroupGloo
        from torchft.coordination import LighthouseServer
        from torchft.local_sgd import DiLoCo

        address = host_address(iface)
        self.lighthouse = None
        if dist.get_rank() == 0:
            self.lighthouse = LighthouseServer(bind=f"{address}:0", min_replicas=hosts)
        # address() names the machine's hostname, which an emulated host cannot reach: the port with our address
        found: list[Any] = [f"http://{address}:{self.lighthouse.address().rsplit(':', 1)[1]}" if self.lighthouse else None]
        dist.broadcast_object_list(found, src=0)
        self.store = dist.TCPStore(address, 0, is_master=True, wait_for_workers=False) if local_rank == 0 else None
        ports: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(ports, (host, self.store.port if self.store else None))
        store_port = next(port for h, port in ports if h == host and port is not None)
        timeout = timedelta(seconds=self.options.timeout_s)
        model_ = model

        def state_dict() -> dict[str, Any]:
            return {"model": model_.state_dict(), "optimizer": inner_optimizer.state_dict()}

        def load_state_dict(state: dict[str, Any]) -> None:
            model_.load_state_dict(state["model"])
            inner_optimizer.load_state_dict(state["optimizer"])

        with _manager_server_on(address):
            self.manager = Manager(
                pg=ProcessGroupGloo(timeout=timeout), load_state_dict=load_state_dict, state_dict=state_dict,
                min_replica_size=hosts, use_async_quorum=False, timeout=timeout, quorum_timeout=timeout,
                connect_timeout=timeout, rank=local_rank, world_size=ranks_per_host, store_addr=address,
                store_port=store_port, lighthouse_addr=found[0], replica_id=f"lm_host_{host}", hostname=address,
                init_sync=False,  # every host starts from the same seeded weights
            )
        fragments = _fragments(model, self.options.fragments)
        outer = [torch.optim.SGD(fragment.parameters(), lr=self.options.outer_lr, momentum=self.options.outer_momentum,
                                 nesterov=self.options.nesterov) for fragment in fragments]
        self.diloco = DiLoCo(self.manager, fragments, inner_optimizer, outer, sync_every=self.options.inner_steps,
                             backup_device=torch.device("cpu"), pin_memory=False,
                             use_bucketization=self.options.use_bucketization,
                             fragment_sync_delay=self.options.fragment_sync_delay,
                             fragment_update_alpha=self.options.fragment_update_alpha)
        self.diloco.__enter__()

    def stats(self) -> dict[str, int]:
        """The Manager's committed exchanges (its step) and the batches they held."""
        return {"torchft_commits": self.manager.current_step(), "torchft_batches": self.manager.batches_committed()}

    def close(self) -> None:
        self.diloco.__exit__(None, None, None)
        self.manager.shutdown(wait=False)
        dist.barrier()  # every Manager is down before the lighthouse and the stores go
        if self.lighthouse is not None:
            self.lighthouse.shutdown()
        self.store = None
