"""The original's launchers, ``python -m bagua.distributed.launch`` and ``python -m bagua.distributed.run``:
their flags mapped onto ``torchrun``, which starts the workers exactly as ``bagua run`` does.

| original flag | here |
| --- | --- |
| ``--nnodes``, ``--node_rank``, ``--nproc_per_node``, ``--master_addr``, ``--master_port``, ``-m``/``--module``, ``--no_python``, ``--standalone``, ``--rdzv_*``, ``--max_restarts``, ``--monitor_interval``, ``--start_method``, ``--role``, ``--run_path``, ``--log_dir``/``--logdir`` | passed to torchrun |
| ``--default_bucket_size N`` | ``BAGUA_DEFAULT_BUCKET_SIZE=N`` |
| ``--autotune_level L`` (L >= 1) | ``BAGUA_AUTOTUNE=1``: bucket sizes tuned inside the job (no autotune service) |
| ``--set_additional_flag`` | the script gets ``--local_rank=N`` as the original passed it |
| ``--use_env`` | accepted; the variables are always set |
| ``--bagua_service_port``, ``--autotune_max_samples``, ``--autotune_sampling_confidence_time``, ``--autotune_warmup_time``, ``--is_output_autotune_log``, ``--report_metrics``, ``--enable_bagua_net``, ``--host_list``, ``--ssh_port`` | accepted with a one-line note: there is no autotune service, Bagua-Net or ssh launcher here |

Example::

    $ python -m bagua.distributed.launch --nproc_per_node=2 train.py --epochs 1
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["main", "translate"]

_TORCHRUN_VALUE_FLAGS = (
    "nnodes", "node_rank", "nproc_per_node", "master_addr", "master_port", "rdzv_backend", "rdzv_endpoint",
    "rdzv_id", "rdzv_conf", "max_restarts", "monitor_interval", "start_method", "role", "log_dir",
)
_TORCHRUN_SWITCHES = ("standalone", "no_python", "run_path")
_NOTED_VALUE_FLAGS = ("bagua_service_port", "autotune_max_samples", "autotune_sampling_confidence_time",
                      "autotune_warmup_time", "host_list", "ssh_port")
_NOTED_SWITCHES = ("is_output_autotune_log", "report_metrics", "enable_bagua_net")


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False,
                                     description="Start workers through torchrun (the original's flags accepted).")
    for flag in _TORCHRUN_VALUE_FLAGS + _NOTED_VALUE_FLAGS:
        parser.add_argument(f"--{flag}", f"--{flag.replace('_', '-')}", dest=flag, default=None)
    parser.add_argument("--logdir", dest="log_dir", default=None)
    for flag in _TORCHRUN_SWITCHES + _NOTED_SWITCHES + ("use_env", "set_additional_flag"):
        parser.add_argument(f"--{flag}", f"--{flag.replace('_', '-')}", dest=flag, action="store_true")
    parser.add_argument("-m", "--module", action="store_true", dest="module")
    parser.add_argument("--default_bucket_size", "--default-bucket-size", type=int, default=None)
    parser.add_argument("--autotune_level", "--autotune-level", type=int, default=0)
    parser.add_argument("training_script")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


def translate(argv: list[str], prog: str = "bagua.distributed.launch") -> tuple[list[str], dict[str, str], list[str]]:
    """(torchrun arguments, environment to set, notes) for the original launcher's ``argv``."""
    args = _parser(prog).parse_args(argv)
    torchrun: list[str] = []
    env: dict[str, str] = {}
    notes: list[str] = []
    for flag in _TORCHRUN_VALUE_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            torchrun.append(f"--{flag.replace('_', '-')}={value}")
    for flag in _TORCHRUN_SWITCHES:
        if getattr(args, flag):
            torchrun.append(f"--{flag.replace('_', '-')}")
    if not any(a.startswith(("--nnodes", "--rdzv", "--master-addr", "--master-port", "--standalone")) for a in torchrun):
        torchrun.insert(0, "--standalone")  # one node on a free port (the original: nnodes=1, 127.0.0.1)
    if args.default_bucket_size is not None:
        env["BAGUA_DEFAULT_BUCKET_SIZE"] = str(args.default_bucket_size)
    if args.autotune_level >= 1:
        env["BAGUA_AUTOTUNE"] = "1"
        notes.append(f"--autotune_level={args.autotune_level}: bucket sizes are tuned inside the job (BAGUA_AUTOTUNE=1)")
    for flag in _NOTED_VALUE_FLAGS + _NOTED_SWITCHES:
        if getattr(args, flag):
            notes.append(f"--{flag} is accepted and has no effect here (no autotune service, Bagua-Net or ssh launcher)")
    script = [args.training_script]
    if args.module:
        script = ["-m", args.training_script]
    if args.set_additional_flag:  # the shim puts --local_rank=N before the script's arguments, as the original did
        script = ["-m", "bagua_cli.local_rank_shim", "--module" if args.module else "--script", args.training_script]
        if args.no_python:
            raise ValueError("--set_additional_flag cannot be combined with --no_python")
    return torchrun + script + list(args.training_script_args), env, notes


def main(argv: list[str] | None = None, prog: str = "bagua.distributed.launch") -> int:
    from bagua_cli.launch import _launch

    torchrun_args, env, notes = translate(list(sys.argv[1:] if argv is None else argv), prog)
    for note in notes:
        print(f"{prog}: note: {note}", file=sys.stderr, flush=True)
    os.environ.update(env)
    return _launch(torchrun_args)
