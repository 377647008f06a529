"""The third-party compressed algorithm of docs/plugins.md ("A compressed algorithm from the core's
building blocks") runs as written: the code block is executed as a plugin module, registered inline (and
unregistered in ``finally``), its op gives exactly the recipe's bits on every rank (flat and
hierarchical, one and many segments, two codecs), and a model trains with it, every rank equal."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import torch
import torch.distributed as dist

from bagua_core import BaguaBucket
from bagua_core.api import tensors
from bagua_algorithms.bytegrad import pipeline
from bagua_core.codecs import get_codec
from bagua_core.plugins import get_plugin_manager
from tests.distributed import run_workers

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
PLUGIN_NAME = "test-acme-compressed"


def guide_module() -> types.ModuleType:
    """The guide's ``acme_compressed.py`` code block, executed as a module."""
    blocks = re.findall(r"```python\n(# acme_compressed\.py.*?)```", GUIDE.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/plugins.md must hold exactly one acme_compressed.py block"
    module = types.ModuleType("acme_compressed")
    sys.modules[module.__name__] = module  # as an import does: pydantic resolves the config's annotations there
    exec(compile(blocks[0], str(GUIDE), "exec"), module.__dict__)  # noqa: S102 (the repository's own docs)
    return module


def _with_plugin(fn, *args):
    pm = get_plugin_manager()
    module = guide_module()
    pm.register(module, name=PLUGIN_NAME)
    try:
        return fn(module, *args)
    finally:
        pm.unregister(name=PLUGIN_NAME)


def _op_exact(module: types.ModuleType) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    for name in ("MinMaxUInt8", "MinMaxUInt4"):
        codec = get_codec(name)
        for segment_numel, hierarchical in ((1 << 19, False), (64, False), (64, True)):
            pipeline.SEGMENT_NUMEL = segment_numel
            x = torch.randn(1003, generator=torch.Generator().manual_seed(rank)) * (rank + 1)
            bucket = BaguaBucket([tensors.mark(x.clone(), "x")], "b", flatten=True)
            bucket.append_op(module.AllgatherAverageOp(name, hierarchical))
            bucket.execute_ops()
            inputs = [torch.empty_like(x) for _ in range(n)]
            dist.all_gather(inputs, x)
            if hierarchical:  # one node: the node average first, then the exchange among one leader
                inputs = [torch.stack(inputs).mean(0)]
            expected = codec.decode_average([codec.encode(v, 1) for v in inputs], len(inputs), torch.empty_like(x))
            assert torch.equal(bucket.buffer[: x.numel()], expected), (name, segment_numel, hierarchical)
    pipeline.SEGMENT_NUMEL = 1 << 19


def _train(module: types.ModuleType) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], {"name": "acme_compressed_allreduce", "compression": "MinMaxUInt4"})
    assert type(model.bagua_algorithm) is module.AcmeImpl
    gen = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(4):
        optimizer.zero_grad()
        (model(torch.randn(8, 16, generator=gen)) - 1).pow(2).mean().backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, flat)
    assert torch.isfinite(flat).all() and all(torch.equal(everyone[0], other) for other in everyone)
    model.bagua_shutdown()


def _op_exact_worker(rank: int) -> None:
    _with_plugin(_op_exact)


def _train_worker(rank: int) -> None:
    _with_plugin(_train)


def test_the_guides_compressed_op_is_the_recipe_3_ranks() -> None:
    run_workers(_op_exact_worker, 3)


def test_a_model_trains_with_the_guides_algorithm_2_ranks() -> None:
    run_workers(_train_worker, 2)
