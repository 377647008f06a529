"""Which torch.distributed backend a job gets (``process_group.choose_backend``), checked with the CUDA
facts replaced: gloo without CUDA; NCCL for CUDA tensors and gloo for CPU tensors with a GPU per local
rank; gloo when ranks must share GPUs; ``BAGUA_BACKEND`` wins but cannot put two NCCL ranks on one GPU."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from bagua_core import BaguaError
from bagua_core.runtime.communication import host_staging
from bagua_core.runtime.process_group import choose_backend


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch):
    def with_gpus(gpus: int, local_rank: int, local_size: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        monkeypatch.setenv("LOCAL_RANK", str(local_rank))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_size))
        monkeypatch.delenv("BAGUA_BACKEND", raising=False)

    return with_gpus


def test_without_cuda_gloo(cuda) -> None:
    cuda(0, 1, 2)
    assert choose_backend() == ("gloo", None, "")


def test_a_gpu_per_local_rank_maps_cuda_to_nccl_and_cpu_to_gloo(cuda) -> None:
    cuda(8, 3, 8)
    assert choose_backend() == ("cpu:gloo,cuda:nccl", 3, "")


def test_ranks_sharing_gpus_run_on_gloo(cuda) -> None:
    cuda(2, 3, 4)
    backend, device, note = choose_backend()
    assert (backend, device) == ("gloo", 1)
    assert "4 local ranks share 2 GPU(s)" in note and "at most 2 processes per node" in note


def test_forced_backend(cuda, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda(1, 1, 2)
    monkeypatch.setenv("BAGUA_BACKEND", "gloo")
    assert choose_backend() == ("gloo", 0, "")
    monkeypatch.setenv("BAGUA_BACKEND", "nccl")
    with pytest.raises(BaguaError, match="needs one GPU per local rank.+local rank 1 of 2 has only 1 GPU"):
        choose_backend()
    cuda(0, 0, 1)
    monkeypatch.setenv("BAGUA_BACKEND", "gloo")
    assert choose_backend() == ("gloo", None, "")


def test_device_mapped_backend_is_read_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "cpu:gloo,cuda:nccl")
    assert host_staging.backend_for(torch.zeros(1), object()) == "gloo"
    assert not host_staging.needs_staging(torch.zeros(1), object())  # CPU tensors never stage
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "gloo")
    assert host_staging.backend_for(torch.zeros(1), object()) == "gloo"
