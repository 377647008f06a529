"""The main job: data-parallel training of an MLP on the shipped digits data set.

Started on every worker by ``bagua train`` (through torch's launcher); can also be run directly with
``bagua run --nproc_per_node 2 -m bagua_examples.train_digits --algorithm bytegrad``.
Rank 0 shows a progress bar and prints the summary: loss, test accuracy, samples/s and the payload
bytes handed to collectives.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import typing
from typing import Any

import logging

import torch
import torch.nn.functional as F
import yaml
from pydantic import ValidationError
from torch.utils.data import DistributedSampler, TensorDataset

import bagua_core as bagua
from bagua_algorithms.auto.link import describe_bandwidth
from bagua_features.checkpoints.files import atomic_write
from bagua_core.runtime.communication import stats
from bagua_core.selection.config import (
    algorithm_class_of,
    algorithm_config_of,
    algorithm_section,
    build_feature,
    features_table,
    load_config_file,
    validate_algorithm_config,
    validate_config_file,
)
from bagua_core.runtime.exceptions import BaguaConfigError, UnknownNameError
from bagua_core.plugins import algorithm_registry
from bagua_core.selection.single_node import is_hierarchical, on_one_node, one_node_note, without_hierarchy
from bagua_examples.digits import DigitsMLP, load_digits
from bagua_examples.run_metrics import format_metrics, metrics_summary, start_metrics
from bagua_examples.progress import Progress, progress_mode
from bagua_examples.run_settings import make_optimizer, resolve_device
from bagua_examples.training_config import TrainingConfig

__all__ = ["train", "main", "parse_args", "CONFIG_TABLES", "single_node_choice"]

# the tables of a config file this job reads besides the algorithm's: `bagua check-config` validates them
# through the bagua.jobs entry point (bagua_cli.jobs.job_config_tables)
CONFIG_TABLES = {"training": TrainingConfig}


def _mean_over_ranks(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    bagua.allreduce_inplace(t, op=bagua.ReduceOp.AVG)
    return float(t.item())


def _chosen_options(algorithm: Any) -> set[str]:
    """The options the user set explicitly (those of a dict, a config file's table, a config or algorithm
    built with them); none for a bare name."""
    if isinstance(algorithm, dict):
        return set(algorithm) - {"name"}
    if isinstance(algorithm, str) and not algorithm.endswith((".toml", ".yaml", ".yml", ".json")):
        return set()
    return set(algorithm_config_of(algorithm).model_fields_set) - {"name"}


def single_node_choice(algorithm: Any) -> tuple[Any, str | None]:
    """What this job runs on one machine, and what to tell the user about it. An algorithm whose
    ``hierarchical`` option defaults to True would, on one machine, only average through the node leader
    (its own exchange runs between nodes): unless the user set ``hierarchical``, the job runs the flat
    variant and says so; an explicit ``hierarchical=True`` runs as asked, with a note."""
    if not on_one_node():
        return algorithm, None
    config = algorithm_config_of(algorithm)
    if is_hierarchical(config) and "hierarchical" not in _chosen_options(algorithm):
        return without_hierarchy(config), (
            f"note: {config.name} ran with hierarchical=False: every rank is on this machine, where hierarchical="
            f"True would only average through the node leader ({config.name} itself runs between nodes); "
            f"--option hierarchical=true keeps the default")
    return algorithm, one_node_note(config)


def _never_synchronised(config: Any, steps: int) -> str:
    """A note for a run in which nothing reached another rank: which of the algorithm's schedule options
    is longer than the run."""
    longer = [f"{k}={v}" for k, v in config.model_dump().items()
              if isinstance(v, int) and not isinstance(v, bool) and v > steps and k.endswith(("steps", "interval",
                                                                                            "every"))]
    why = f" ({', '.join(longer)} > the {steps} steps run)" if longer else ""
    return (f"note: nothing was handed to collectives: {config.name} never synchronised the ranks in this run"
            f"{why}; each rank trained alone")


def _shaped_loader(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainingConfig) -> Any:
    """The model's data loader (``bagua_data_loader``) when one of its features shapes the data (a cache, a
    sampler); None when it would be torch's DistributedSampler over the tensors as they are: the job then indexes
    them itself, a batch at a time."""
    dataset = TensorDataset(x, y)
    loader = model.bagua_data_loader(dataset, batch_size=cfg.batch_size, shuffle=True, seed=cfg.seed, drop_last=True)
    return None if type(loader.sampler) is DistributedSampler and loader.dataset is dataset else loader


def train(cfg: TrainingConfig, algorithm: Any, tensorboard: str | None = None,
          features: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train on this worker's shard; every rank returns the same summary dict. ``tensorboard``: rank 0 writes
    the run's metrics there; ``features``: the features to run (name -> options), beside a config file's."""
    rank, world = bagua.get_rank(), bagua.get_world_size()
    algorithm, note = single_node_choice(algorithm)
    # auto's choice is in the summary; its log line would land in the progress bar's line
    logging.getLogger("bagua.auto").addHandler(logging.NullHandler())
    device = resolve_device(cfg.device)
    train_x, train_y, test_x, test_y = (t.to(device) for t in load_digits(seed=cfg.seed))
    torch.manual_seed(cfg.seed)
    model = DigitsMLP(cfg.hidden).to(device)
    config = algorithm_config_of(algorithm)
    name = config.name
    shard = torch.arange(rank, len(train_y), world, device=device)  # disjoint shards of equal size (+-1)
    steps_per_epoch = len(train_y) // world // cfg.batch_size  # equal on every rank
    optimizer = make_optimizer(model, cfg, algorithm_class_of(name), steps_per_epoch)
    model = model.with_bagua([optimizer], algorithm, features=features or None)
    loader = _shaped_loader(model, train_x, train_y, cfg)
    if loader is not None:
        steps_per_epoch = len(loader)
    step_optimizer = getattr(optimizer, "fuse_step", optimizer.step)  # a fused optimizer steps on flat tensors
    stats.reset()
    metrics = start_metrics(model, tensorboard)
    progress = Progress(cfg.epochs, cfg.epochs * steps_per_epoch, f"{name} x{world}", shown=rank == 0 and cfg.progress)
    started = time.perf_counter()
    loss_value = float("nan")
    for epoch in range(cfg.epochs):
        if loader is not None:
            loader.sampler.set_epoch(epoch)
            batches = iter(loader)
        else:
            permutation = torch.randperm(len(shard), generator=torch.Generator().manual_seed(cfg.seed + epoch))
            order = shard[permutation.to(device)]
            batches = ((train_x[idx], train_y[idx]) for idx in (order[step * cfg.batch_size:(step + 1) * cfg.batch_size]
                                                               for step in range(steps_per_epoch)))
        for x, y in batches:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            step_optimizer()
            loss_value = loss.item()
            metrics.note_loss(loss_value)
            progress.step(epoch, loss_value)
        progress.epoch_done(epoch, loss_value, f"{steps_per_epoch} steps")
    elapsed = time.perf_counter() - started
    progress.close()
    if model.bagua_capabilities.background_work:
        model.bagua_algorithm.abort(model)  # stop its background communication on every rank
    communicated = stats.total_bytes()
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    auto = getattr(model, "bagua_auto_result", None)
    if world > 1 and communicated == 0:
        note = _never_synchronised(config, cfg.epochs * steps_per_epoch)
    summary = {
        "algorithm": name,
        "auto": auto,
        "world_size": world,
        "device": device.type,
        "epochs": cfg.epochs,
        "final_loss": _mean_over_ranks(loss_value),
        "test_accuracy": _mean_over_ranks(accuracy),
        "samples_per_s": world * cfg.epochs * steps_per_epoch * cfg.batch_size / max(_mean_over_ranks(elapsed), 1e-9),
        "bytes_communicated_per_rank": int(_mean_over_ranks(float(communicated))),
        "seconds": _mean_over_ranks(elapsed),
        "note": note,
        **metrics_summary(metrics, elapsed, _mean_over_ranks),
    }
    model.bagua_shutdown()
    return summary


def _plain(text: str | None) -> str | None:
    """A field's docstring as help text: its reST literals (``cuda``) shown as plain words."""
    return text.replace("``", "") if text else text


def _flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def parse_args(argv: list[str] | None, prog: str | None = None) -> tuple[TrainingConfig, Any, argparse.Namespace]:
    """The training options and the algorithm from the flags and the ``--config`` file. Errors name the
    file and ``table.field``, or the flag; ``--algorithm`` and a file's algorithm together are refused."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default=None, metavar="NAME",
                        help="an installed algorithm: " + ", ".join(algorithm_registry.names()) + " (auto: the "
                             "fastest drop-in one, chosen while training; default gradient_allreduce)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the algorithm, written as in a config file (repeatable): --option "
                             "hierarchical=false --option compression=MinMaxUInt4; validated like a config file")
    parser.add_argument("--feature", action="append", nargs="+", default=[], metavar=("NAME", "KEY=VALUE"),
                        help="a feature to run beside the algorithm (bagua plugins lists them), with its options "
                             "written as --option's (repeatable): --feature sync_batchnorm --feature "
                             "gradient_clipping max_norm=1.0; validated like a config file's [features.NAME] table")
    parser.add_argument("--config", default=os.environ.get("BAGUA_CONFIG_FILE"),
                        help="config file with [algorithm], [training] and [features.NAME] tables")
    parser.add_argument("--tensorboard", default=None, metavar="DIR",
                        help="write per-step and per-round metrics (exposed communication seconds, bytes, loss, "
                             "compression ratio) as TensorBoard scalars to DIR (rank 0; needs the tensorboard "
                             "package: pip install \"bagua[tensorboard]\")")
    parser.add_argument("--summary-json", default=None,
                        help="also write the summary to this file (rank 0; in a fault-tolerant job, each replica's "
                             "rank 0 writes it whole and the last one to finish stays, unless the name holds "
                             "{replica}: then each replica writes its own)")
    for name, field in TrainingConfig.model_fields.items():
        flag = _flag(name)
        # default None: a flag not given leaves the config file's value; the help shows the training default
        shown = "on" if field.default is True else "off" if field.default is False else field.default
        help_text = _plain(field.description)
        if field.default is not None and "default" not in help_text:
            help_text += f" (default: {shown})"
        if field.annotation is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif typing.get_origin(field.annotation) is typing.Literal:
            parser.add_argument(flag, default=None, choices=typing.get_args(field.annotation), help=help_text)
        else:
            arg_type = type(field.default) if field.default is not None else float
            parser.add_argument(flag, default=None, type=arg_type, help=help_text)
    args = parser.parse_args(argv)
    if args.algorithm:
        try:
            algorithm_class_of(args.algorithm)
        except UnknownNameError as exc:
            raise BaguaConfigError(f"--algorithm {args.algorithm}: {exc}") from None
    options: dict[str, Any] = {}
    algorithm: Any = "gradient_allreduce"
    if args.config:
        file_algorithm, tables = validate_config_file(args.config, CONFIG_TABLES)  # every table, named errors
        if "training" in tables:
            options.update(tables["training"].model_dump(exclude_unset=True))
        if file_algorithm is not None:
            if args.algorithm:
                raise BaguaConfigError(
                    f"--algorithm {args.algorithm} and {args.config}'s algorithm ({file_algorithm.name}) both choose "
                    f"the algorithm; drop --algorithm, or the algorithm from {args.config}")
            algorithm = args.config
    flags = {k: v for k, v in vars(args).items() if k in TrainingConfig.model_fields and v is not None}
    options.update(flags)
    if args.algorithm:
        algorithm = args.algorithm
    if args.option:
        algorithm = _with_options(algorithm, args.option)
    args.features = _features(args.config, args.feature)
    try:
        return TrainingConfig(**options), algorithm, args
    except ValidationError as exc:  # only a flag can be wrong here: the file's table validated above
        lines = [f"  {_flag(str(e['loc'][0]))} {e.get('input')!r}: {e['msg']}" for e in exc.errors()]
        raise BaguaConfigError("invalid training options:\n" + "\n".join(lines)) from None


def _with_options(algorithm: str, pairs: list[str]) -> dict[str, Any]:
    """``algorithm`` (a name or a config file) with the ``--option KEY=VALUE`` pairs on top, validated as a
    config file's table is (a value is read as in YAML: ``false``, ``4``, ``MinMaxUInt4``)."""
    data: dict[str, Any] = dict(algorithm_section(load_config_file(algorithm))) \
        if algorithm.endswith((".toml", ".yaml", ".yml", ".json")) else {"name": algorithm}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise BaguaConfigError(f"--option {pair!r}: write KEY=VALUE, e.g. --option hierarchical=false")
        data[key.strip()] = yaml.safe_load(raw) if raw.strip() else raw
    try:
        validate_algorithm_config(data, source="--option")
    except BaguaConfigError as exc:
        raise BaguaConfigError(f"{exc} (from --option {' --option '.join(pairs)})") from None
    return data


def _features(config: str | None, given: list[list[str]]) -> dict[str, dict[str, Any]]:
    """The features to run, name -> options: the config file's ``[features.NAME]`` tables, then each ``--feature
    NAME KEY=VALUE ...`` (a name given again replaces its options), every one validated (an unknown name or option
    is refused with a guess, before any worker starts)."""
    features = {f.name: f.canonical_options() for f in features_table(load_config_file(config), config)} if config \
        else {}
    for name, *pairs in given:
        options: dict[str, Any] = {}
        for pair in pairs:
            key, sep, raw = pair.partition("=")
            if not sep or not key.strip():
                raise BaguaConfigError(f"--feature {name} {pair!r}: write KEY=VALUE, e.g. --feature {name} key=value")
            options[key.strip()] = yaml.safe_load(raw) if raw.strip() else raw
        try:
            features[name] = build_feature(name, options).canonical_options()
        except (BaguaConfigError, UnknownNameError) as exc:
            raise type(exc)(f"--feature {' '.join([name, *pairs])}: {exc}") from None
    return features


def _reports_fault_tolerant() -> bool:
    from bagua_examples.train_digits_ft import reports

    return reports()


def format_summary(summary: dict[str, Any]) -> str:
    """The summary line rank 0 prints."""
    epochs = summary["epochs"]
    workers = summary["world_size"]
    return (f"{summary['algorithm']} on {workers} worker{'' if workers == 1 else 's'} ({summary['device']}), "
            f"{epochs} epoch{'' if epochs == 1 else 's'}: "
            f"loss {summary['final_loss']:.4f}, test accuracy {summary['test_accuracy'] * 100:.2f}%, "
            f"{summary['samples_per_s']:.0f} samples/s, "
            f"{format_bytes(summary['bytes_communicated_per_rank'])} handed to collectives per worker")


def format_bytes(count: float) -> str:
    """A byte count in the largest unit (bytes, kB, MB, GB: powers of 1000) that keeps it at least 1, so that
    a small count (sparseloco's few kB) never reads as 0.00 MB."""
    if count < 1000:
        return f"{count:.0f} bytes"
    for unit in ("kB", "MB", "GB"):
        count /= 1000
        if count < 1000 or unit == "GB":
            return f"{count:.2f} {unit}"
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    cfg, algorithm, args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    bagua.init_process_group()  # a replica of a fault-tolerant job under `bagua train --fault-tolerant`
    rank = bagua.get_rank()
    try:
        from bagua_features.fault_tolerance import current_runtime

        if current_runtime() is not None:  # the shard follows each step's quorum
            from bagua_examples.train_digits_ft import train_fault_tolerant

            summary = train_fault_tolerant(cfg, algorithm, args.tensorboard, args.features)
        else:
            summary = train(cfg, algorithm, args.tensorboard, args.features)
    finally:
        bagua.destroy_process_group()
    fault_tolerant = summary.get("fault_tolerance") is not None
    if rank == 0 and (not fault_tolerant or _reports_fault_tolerant()):
        if cfg.progress and progress_mode() == "bar":  # below the progress bar
            print()
        print(format_summary(summary))
        if format_metrics(summary):
            print(format_metrics(summary))
        if summary.get("note"):  # the fault-tolerant job's summary has none
            print(summary["note"])
        if fault_tolerant:
            from bagua_examples.train_digits_ft import format_fault_tolerance

            print(format_fault_tolerance(summary["fault_tolerance"]))
        if summary["auto"]:
            auto = summary["auto"]
            times = ", ".join(f"{n} {t * 1e3:.2f} ms" for n, t in auto["step_time_s"].items())
            options = auto.get("options", {}).get(auto["algorithm"]) or {}
            with_options = "".join(f" with {k}={v}" for k, v in options.items())  # the single-node variant
            print(f"auto chose {auto['algorithm']} at step {auto['decided_at_step']}{with_options} "
                  f"(step time per candidate: "
                  f"{times}; link latency {auto['latency_s'] * 1e3:.3f} ms, bandwidth {describe_bandwidth(auto)})")
    if rank == 0 and args.summary_json:
        # every replica's rank 0 of a fault-tolerant job writes it: each write is whole (the last stays)
        path = args.summary_json.replace("{replica}", os.environ.get("BAGUA_FT_REPLICA_INDEX", "0"))
        atomic_write(path, lambda fh: fh.write(json.dumps(summary, indent=2).encode()))
    return summary


if __name__ == "__main__":
    main()
