"""The path of a bucket from backward to the wire, measured: which of the project's files and functions one
training step's backward runs through, and the calls that cross from one package to another.

Two ranks on gloo (this machine's CPU), two emulated nodes of one rank each, train a small MLP wrapped with ``--algorithm``; after two steps, one
backward is traced on the training thread, autograd's and the group's communication thread (``sys.setprofile``:
every call into ``bagua_core``, ``bagua_algorithms`` or ``bagua_codecs``). A package is ``bagua_core.<wing>``
(``module``, ``lifecycle``, ``runtime``, ...), ``bagua_algorithms.<algorithm>`` or ``bagua_codecs.<codec>``; a
crossing is a caller-callee pair of packages that differ. Rank 0 prints the files in the order first entered, with
the functions each ran, then the crossings.

Usage::

    python tools/bucket_path.py --algorithm bytegrad
    python tools/bucket_path.py --algorithm gradient_allreduce --json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import sys
import tempfile
import threading

import torch
import torch.multiprocessing as mp

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("bagua_core", "bagua_algorithms", "bagua_codecs")


def package_of(relative: str) -> str:
    """``bagua_core/lifecycle/bucket.py`` -> ``bagua_core.lifecycle``; a top-level file is its package."""
    parts = relative.split("/")
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


class Tracer:
    """Records every call into the project's packages: the files in the order first entered, each file's functions,
    and the package-crossing calls (caller package, callee package, callee file:function); and, at every call from
    the project into ``torch.distributed`` (the wire), the chain of the project's frames that led there, per thread
    (``chains``: ``file:function`` from the outermost frame in)."""

    def __init__(self) -> None:
        self.files: dict[str, list[str]] = {}
        self.crossings: dict[tuple[str, str], str] = {}
        self.chains: dict[str, list[str]] = {}
        self.lock = threading.Lock()

    def _chain(self, frame) -> list[str]:  # noqa: ANN001
        chain = []
        while frame is not None:
            relative = self._relative(frame)
            if relative is not None:
                chain.append(f"{relative}:{frame.f_code.co_qualname}")
            frame = frame.f_back
        return chain[::-1]

    def _relative(self, frame) -> str | None:
        path = frame.f_code.co_filename
        if not path.startswith(str(ROOT)):
            return None
        relative = path[len(str(ROOT)) + 1:]
        return relative if relative.split("/")[0] in PACKAGES else None

    def __call__(self, frame, event, arg):  # noqa: ANN001
        if event != "call":
            return
        relative = self._relative(frame)
        if relative is None:
            if str(frame.f_globals.get("__name__", "")).startswith("torch.distributed") and \
                    frame.f_back is not None and self._relative(frame.f_back) is not None:
                chain = self._chain(frame.f_back)
                with self.lock:
                    self.chains.setdefault(" > ".join(chain), [])
                    self.chains[" > ".join(chain)].append(frame.f_code.co_qualname)
            return
        name = frame.f_code.co_qualname
        caller, back = None, frame.f_back
        while back is not None and caller is None:
            caller = self._relative(back)
            back = back.f_back
        with self.lock:
            names = self.files.setdefault(relative, [])
            if name not in names:
                names.append(name)
            if caller is not None and package_of(caller) != package_of(relative):
                self.crossings.setdefault((package_of(caller), package_of(relative)), f"{relative}:{name}")


def trace_one_backward(algorithm: str) -> dict:
    """In a process of an initialised job: wrap a small MLP with ``algorithm``, train two steps, trace the third's
    backward and return the record (``files``: file -> functions, ``crossings``, ``chains``)."""
    from bagua_core.api import WrappedModule  # (importing bagua_core gives modules with_bagua)

    rank = torch.distributed.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model = model.with_bagua([optimizer], algorithm)
    data = torch.randn(16, 64, generator=torch.Generator().manual_seed(rank))
    for _ in range(2):
        optimizer.zero_grad()
        model(data).square().mean().backward()
        optimizer.step()
    tracer = Tracer()
    worker = WrappedModule(model).process_group.worker
    worker.submit(sys.setprofile, tracer)  # the communication thread traces from its next task on
    worker.synchronize()
    threading.setprofile(tracer)  # autograd's threads started from now on
    optimizer.zero_grad()
    loss = model(data).square().mean()
    sys.setprofile(tracer)
    try:
        loss.backward()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        worker.submit(sys.setprofile, None)
        worker.synchronize()
    optimizer.step()
    WrappedModule(model).shutdown()
    return {"files": tracer.files, "chains": tracer.chains,
            "crossings": [[a, b, where] for (a, b), where in tracer.crossings.items()]}


def _worker(rank: int, world: int, port: int, algorithm: str, out: str) -> None:
    # two emulated nodes of one rank each (torchrun's variables): an exchange between nodes reaches the wire
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", GROUP_RANK=str(rank), OMP_NUM_THREADS="1")
    import bagua_core as bagua

    bagua.init_process_group()
    record = trace_one_backward(algorithm)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(record, f)
    bagua.destroy_process_group()


def chain_summary(chain: str) -> tuple[list[str], list[str]]:
    """The files of one chain (``file:function > ...``) in order, and its package crossings (``a -> b``), the last
    one into ``torch.distributed``."""
    files = list(dict.fromkeys(step.split(":")[0] for step in chain.split(" > ")))
    packages = [package_of(f) for f in files] + ["torch.distributed"]
    crossings = [f"{a} -> {b}" for a, b in zip(packages, packages[1:]) if a != b]
    return files, list(dict.fromkeys(crossings))


def measure(algorithm: str) -> dict:
    """Run the two ranks and return rank 0's record (``files``: file -> functions; ``crossings``)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "path.json")
        mp.spawn(_worker, args=(2, port, algorithm, out), nprocs=2, join=True)
        with open(out) as f:
            return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithm", default="bytegrad")
    parser.add_argument("--json", action="store_true", help="print the record as JSON")
    args = parser.parse_args()
    record = measure(args.algorithm)
    if args.json:
        print(json.dumps(record, indent=1))
        return
    files, crossings = record["files"], record["crossings"]
    functions = sum(len(names) for names in files.values())
    print(f"{args.algorithm}: {len(files)} files, {functions} functions, {len(crossings)} package crossings")
    for path, names in files.items():
        print(f"  {path}: {', '.join(names)}")
    for caller, callee, where in crossings:
        print(f"  {caller} -> {callee}  ({where})")
    print("chains from the project into torch.distributed (the wire), per thread:")
    for chain, calls in record["chains"].items():
        chain_files, chain_crossings = chain_summary(chain)
        print(f"  {len(chain_files)} files, {len(chain_crossings)} package crossings "
              f"({'; '.join(chain_crossings)}), then torch.distributed.{'/'.join(sorted(set(calls)))}:")
        for step in chain.split(" > "):
            print(f"    {step}")

if __name__ == "__main__":
    main()
