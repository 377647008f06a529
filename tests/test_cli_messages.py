"""What a user meets at the bagua command: every table of a config file checked, errors that name the
file, the table.field and what to do, help that says what the command is, types with their values."""

from __future__ import annotations

import pytest

from bagua_cli import main
from bagua_cli.jobs import job_config_tables
from bagua_core.selection.config import validate_config_file
from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_examples.train_digits import CONFIG_TABLES, format_summary, parse_args
from bagua_examples.training_config import TrainingConfig


def test_the_main_job_contributes_its_training_table() -> None:
    assert job_config_tables()["training"] is TrainingConfig is CONFIG_TABLES["training"]


def test_check_config_checks_the_training_table(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[algorithm]\nname = "gradient_allreduce"\n[training]\nepochs = 0\nepoch = 3\n[trainin]\nlr = 1\n')
    assert main(["check-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert "training.epochs: Input should be greater than or equal to 1" in err
    assert "training.epoch: Extra inputs are not permitted (unknown field; allowed: batch_size, device, epochs" in err
    assert "[trainin]: unknown table; a config file holds [algorithm], [training]" in err
    assert "errors.pydantic.dev" not in err and "type=" not in err  # no raw pydantic dump
    good = tmp_path / "training_only.json"
    good.write_text('{"training": {"epochs": 2, "optimizer": "adam"}}')
    assert main(["check-config", str(good)]) == 0
    assert "no algorithm (the job's default); [training]: {'epochs': 2, 'optimizer': 'adam'}" in capsys.readouterr().out


def test_check_config_reports_every_table_at_once(tmp_path) -> None:
    bad = tmp_path / "both.yaml"
    bad.write_text("name: gradient_allreduce\naverage: maybe\ntraining:\n  optimizer: lbfgs\n")
    with pytest.raises(BaguaConfigError) as info:
        validate_config_file(bad, job_config_tables())
    message = str(info.value)
    assert "average: Input should be a valid boolean" in message  # the algorithm at the top level
    assert f"invalid {bad}: [training] table:\n  training.optimizer: Input should be 'sgd' or 'adam'" in message
    nameless = tmp_path / "nameless.json"
    nameless.write_text('{"hierarchical": true}')
    with pytest.raises(BaguaConfigError, match=r"nameless\.json: no algorithm 'name'.*add name = "):
        validate_config_file(nameless, job_config_tables())
    not_a_table = tmp_path / "scalar.toml"
    not_a_table.write_text('training = 3\nname = "gradient_allreduce"\n')
    with pytest.raises(BaguaConfigError, match=r"scalar\.toml: training: must be a table of options, got 3"):
        validate_config_file(not_a_table, job_config_tables())


def test_the_main_job_names_the_file_and_field(tmp_path) -> None:
    bad = tmp_path / "job.toml"
    bad.write_text("[training]\nbatch_size = -1\n")
    with pytest.raises(BaguaConfigError) as info:
        parse_args(["--config", str(bad)])
    assert f"invalid {bad}: [training] table:\n  training.batch_size: Input should be greater than or equal to 1" in str(info.value)
    with pytest.raises(BaguaConfigError, match=r"--epochs 0: Input should be greater than or equal to 1"):
        parse_args(["--epochs", "0"])


def test_algorithm_flag_and_a_files_algorithm_are_refused_together(tmp_path) -> None:
    both = tmp_path / "both.toml"
    both.write_text('[algorithm]\nname = "gradient_allreduce"\n[training]\nepochs = 2\n')
    with pytest.raises(BaguaConfigError, match=r"--algorithm bytegrad and .*both\.toml's algorithm \(gradient_allreduce\) "
                                               r"both choose the algorithm; drop --algorithm"):
        parse_args(["--config", str(both), "--algorithm", "bytegrad"])
    training_only = tmp_path / "training.toml"
    training_only.write_text("[training]\nepochs = 2\n")
    cfg, algorithm, _ = parse_args(["--config", str(training_only), "--algorithm", "bytegrad"])
    assert (cfg.epochs, algorithm) == (2, "bytegrad")


def test_help_names_the_command(capsys) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: bagua train [--nproc N]" in out and "usage: bagua [" not in out and "--epochs" in out
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: bagua run" in out and "--config FILE" in out and "--nproc-per-node" in out


def test_plugins_prints_allowed_values(capsys) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "peer_selection_mode: one of 'all', 'shift_one' = default 'all'" in out
    assert "fragments: int or None = default None" in out
    assert "Literal" not in out and "Optional" not in out


def test_summary_says_epoch_or_epochs() -> None:
    summary = {"algorithm": "gradient_allreduce", "world_size": 2, "device": "cpu", "epochs": 1, "final_loss": 0.5,
               "test_accuracy": 0.9, "samples_per_s": 100.0, "bytes_communicated_per_rank": 2e6}
    assert ", 1 epoch: loss 0.5000" in format_summary(summary)
    assert ", 3 epochs: loss" in format_summary({**summary, "epochs": 3})
    assert format_summary(summary).startswith("gradient_allreduce on 2 workers (cpu)")
    assert format_summary({**summary, "world_size": 1}).startswith("gradient_allreduce on 1 worker (cpu)")


@pytest.mark.parametrize("count, shown", [(0, "0 bytes"), (1379, "1.38 kB"), (999, "999 bytes"), (2e6, "2.00 MB"),
                                          (12_345, "12.35 kB"), (3.5e9, "3.50 GB")])
def test_summary_shows_a_small_byte_count(count: float, shown: str) -> None:
    """sparseloco hands a few kB to collectives: its summary never reads "0.00 MB"."""
    summary = {"algorithm": "sparseloco", "world_size": 2, "device": "cpu", "epochs": 1, "final_loss": 0.5,
               "test_accuracy": 0.9, "samples_per_s": 100.0, "bytes_communicated_per_rank": count}
    assert format_summary(summary).endswith(f", {shown} handed to collectives per worker")


def test_a_misspelt_algorithm_flag_gets_one_line_and_a_guess(capsys) -> None:
    assert main(["train", "--algorithm", "bytegrd"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bagua train: error: --algorithm bytegrd: unknown algorithm 'bytegrd' "
                          "(did you mean 'bytegrad'?); available: "), err
    assert "usage:" not in err and len(err.strip().splitlines()) == 1


def test_an_unknown_codec_is_named_once_with_a_guess() -> None:
    with pytest.raises(BaguaConfigError) as info:
        parse_args(["--algorithm", "bytegrad", "--option", "compression=MinMaxUInt9"])
    message = str(info.value)
    assert message.count("'MinMaxUInt9'") == 1 and "(did you mean 'MinMaxUInt8'?)" in message, message


def test_max_restarts_belongs_to_fault_tolerant_mode(capsys) -> None:
    assert main(["train", "--max-restarts", "1"]) == 2
    assert "--max-restarts restarts a failed replica of a fault-tolerant job: add --fault-tolerant" in \
        capsys.readouterr().err
    assert main(["train", "--fault-tolerant", "--max-restarts", "-1"]) == 2
    assert "--max-restarts must be a non-negative integer, got -1" in capsys.readouterr().err


def test_a_lighthouse_port_in_use_is_one_line_before_any_replica_starts(capsys) -> None:
    pytest.importorskip("torchft")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["train", "--fault-tolerant", "--replicas", "2", "--lighthouse-port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"--lighthouse-port {port}: 127.0.0.1:{port} is not free" in err and "Traceback" not in err, err


def test_run_checks_every_table_before_starting_workers(tmp_path, capsys) -> None:
    bad = tmp_path / "run.toml"
    bad.write_text('[algorithm]\nname = "gradient_allreduce"\n[training]\nlr = -1\n')
    assert main(["run", "--config", str(bad), "--nproc_per_node=2", "never_started.py"]) == 2
    err = capsys.readouterr().err
    assert f"bagua run: error: invalid {bad}: [training] table:\n  training.lr: Input should be greater than 0" in err


@pytest.mark.parametrize("argv, guess", [
    (["train", "--algoritm", "bytegrad"], "--algorithm"),  # the job's flag
    (["train", "--nprocs", "2"], "--nproc"),  # the launcher's flag
    (["train", "--fault-tolerant", "--replcas", "2"], "--replicas"),
    (["train", "--epochs", "1", "--bach-size=4"], "--batch-size"),
    (["run", "--nprocs", "2", "train.py"], "--nproc-per-node"),  # torchrun's flag
    (["run", "--verbos", "train.py"], "--verbose"),  # bagua run's own
    (["plugins", "--jsn"], "--json"),
    (["check-config", "--hlp", "x.toml"], "--help"),
])
def test_a_misspelt_flag_gets_a_guess_in_one_line(capsys, argv: list[str], guess: str) -> None:
    """No usage block (torchrun's is 20 lines): the error, the guess and where the options are, in a line."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    command = f"bagua {argv[0]}"
    assert out == ""
    assert err.strip().splitlines() == [err.strip()], err
    assert err.startswith(f"{command}: error: unrecognized arguments: ") and f"(did you mean {guess}?)" in err, err
    assert err.rstrip().endswith(f"`{command} --help` lists the options")


def test_a_flag_with_no_likely_spelling_gets_no_guess(capsys) -> None:
    assert main(["train", "--zzzzzz"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --zzzzzz;" in err and "did you mean" not in err


def test_a_bad_value_is_one_line(capsys) -> None:
    assert main(["train", "--epochs", "x"]) == 2
    assert capsys.readouterr().err == \
        "bagua train: error: argument --epochs: invalid int value: 'x'; `bagua train --help` lists the options\n"


def test_train_help_has_one_usage_line_and_the_defaults(capsys) -> None:
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.count("usage:") == 1
    flat = " ".join(out.split())
    for shown in ("--epochs EPOCHS Passes over the training set. (default: 10)",
                  "--batch-size BATCH_SIZE Samples per step on each worker. (default: 32)",
                  "(default: on)", "--nproc N local worker processes (default: 2;"):
        assert shown in flat, shown
