"""hierarchical=True on one node runs nothing of the algorithm itself: ``bagua train`` runs the flat variant
unless the user chose ``hierarchical``, says which it ran and how to change it, and the helpers ask the config
model, never a name."""

from __future__ import annotations

from bagua_core.selection.config import algorithm_config_of
from bagua_core.plugins import algorithm_registry
from bagua_core.selection.single_node import defaults_to_hierarchical, one_node_note, without_hierarchy
from tests.distributed import run_workers


def test_the_config_model_decides() -> None:
    hierarchical = {name for name in algorithm_registry.names()
                    if defaults_to_hierarchical(algorithm_registry.get(name).Config)}
    assert {"bytegrad", "decentralized", "low_precision_decentralized", "qadam"} <= hierarchical
    assert "gradient_allreduce" not in hierarchical and "async" not in hierarchical
    config = algorithm_config_of({"name": "bytegrad", "compression": "MinMaxUInt4"})
    flat = without_hierarchy(config)
    assert flat.hierarchical is False and flat.compression == "MinMaxUInt4" and config.hierarchical is True
    assert without_hierarchy(algorithm_config_of("gradient_allreduce")) == algorithm_config_of("gradient_allreduce")
    assert one_node_note(flat) is None and one_node_note(algorithm_config_of("gradient_allreduce")) is None
    note = one_node_note(config)
    assert "bytegrad ran with hierarchical=True on one machine" in note and "--option hierarchical=false" in note
    assert "compress" not in one_node_note(algorithm_config_of("decentralized"))  # decentralized never compresses


def _summary(rank: int, algorithm) -> dict:
    from bagua_examples.train_digits import train
    from bagua_examples.training_config import TrainingConfig

    summary = train(TrainingConfig(epochs=1, progress=False, hidden=16), algorithm)
    return {"note": summary["note"], "bytes": summary["bytes_communicated_per_rank"]}


def test_train_on_one_node_runs_the_flat_variant_unless_told() -> None:
    default = run_workers(_summary, 2, "bytegrad")
    hierarchical = run_workers(_summary, 2, {"name": "bytegrad", "hierarchical": True})
    flat = run_workers(_summary, 2, {"name": "bytegrad", "hierarchical": False})
    allreduce = run_workers(_summary, 2, "gradient_allreduce")
    two_nodes = run_workers(_summary, 2, "bytegrad", local_size=1)
    assert "bytegrad ran with hierarchical=False: every rank is on this machine" in default[0]["note"]
    assert "bytegrad ran with hierarchical=True on one machine" in hierarchical[0]["note"]
    assert flat[0]["note"] is None and allreduce[0]["note"] is None and two_nodes[0]["note"] is None
    # what the notes explain: twice an allreduce's bytes hierarchically; compressed (a fraction) flat
    assert hierarchical[0]["bytes"] == 2 * allreduce[0]["bytes"]
    assert default[0]["bytes"] == flat[0]["bytes"] < allreduce[0]["bytes"] / 2


def test_a_run_that_never_synchronised_says_so() -> None:
    summary = run_workers(_summary, 2, {"name": "diloco", "inner_steps": 1000})[0]
    assert summary["bytes"] == 0 and "diloco never synchronised the ranks" in summary["note"]
    assert "inner_steps=1000 > the" in summary["note"]
