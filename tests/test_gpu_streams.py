"""CUDA stream order around bucket communication: the communication waits for the stream that produced
a gradient (an event recorded when it is marked ready), and the training thread waits for the
communication before it reads the result; on the process group's worker thread and its stream."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bagua_core.api import tensors

from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.runtime.communication.worker import CommunicationWorker

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

SPIN = 300_000_000  # GPU clock cycles (~0.2 s): long enough for an unordered read to see stale data


def _bucket(numel: int = 1 << 20) -> tuple[BaguaBucket, torch.Tensor, CommunicationWorker]:
    tensor = tensors.mark(torch.zeros(numel, device="cuda"), "t", "m")
    bucket = BaguaBucket([tensor], "b", flatten=False)
    worker = CommunicationWorker("streams-test")
    bucket.process_group = SimpleNamespace(worker=worker)
    return bucket, tensor, worker


def test_communication_waits_for_the_producing_stream() -> None:
    bucket, tensor, worker = _bucket()
    seen = torch.full_like(tensor, -1.0)
    bucket.append_op(lambda b: seen.copy_(b.tensors[0]))
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SPIN)
        tensor.fill_(3.0)
        tensors.mark_ready(tensor)
    worker.submit(bucket.execute_ops).result(timeout=60)  # the op runs on the worker's stream
    bucket.wait_communication()
    torch.cuda.synchronize()
    assert bool((seen == 3.0).all()), "the communication read the tensor before its producer wrote it"
    assert worker.cuda_stream(tensor.device) != torch.cuda.current_stream()
    worker.shutdown()


def test_training_stream_waits_for_the_communication() -> None:
    bucket, tensor, worker = _bucket()

    def slow_write(b: BaguaBucket) -> None:
        torch.cuda._sleep(SPIN)
        b.tensors[0].fill_(5.0)

    bucket.append_op(slow_write)
    tensors.mark_ready(tensor)
    worker.submit(bucket.execute_ops).result(timeout=60)
    bucket.wait_communication()
    after = tensor.clone()  # on the training thread's current stream
    torch.cuda.synchronize()
    assert bool((after == 5.0).all()), "the training stream read the result before the communication wrote it"
    worker.shutdown()


def test_without_synchronization_records_no_event() -> None:
    bucket, tensor, worker = _bucket(16)
    tensors.mark_ready(tensor, synchronize=False)
    assert bucket._ready_events.take() == []
    bucket.reset_ready()
    producer = torch.cuda.Stream()
    with torch.cuda.stream(producer):
        tensors.mark_ready(tensor)
    assert len(bucket._ready_events.take()) == 1
    worker.shutdown()
