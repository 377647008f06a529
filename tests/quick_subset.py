"""Which tests ``-m "not slow"`` leaves out beyond those marked ``slow`` where they are written.

The quick subset is for a developer's loop: under 5 minutes on a 2-core machine, with every algorithm's
training checked against its oracle at least once (``tests/test_quick_subset.py`` checks both that each
pattern below still names a test and that every built-in algorithm keeps a quick test). What it leaves out
runs in the full suite, which CI runs: the other cases of a parametrized multi-process test, launcher and
benchmark harnesses, and the second and third check of what a quick test already covers.

``SLOW`` holds patterns of node ids (``*`` stands for any text; everything else, brackets included, is
literal); ``QUICK`` holds those kept in the quick subset although a
``SLOW`` pattern matches them (one case of a family). Costs were measured with the suite on 6 xdist workers.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

SLOW = (
    # launchers, benchmark harnesses and integrations: each starts workers, often several jobs
    "tests/test_lightning.py::test_every_builtin_algorithm_trains[*",
    "tests/test_lightning.py::test_gradient_allreduce_equals_lightning_ddp",
    "tests/test_benchmarks_smoke.py::test_e2e_harness_*",
    "tests/test_benchmarks_smoke.py::test_micro_benchmarks_run_once",
    "tests/test_benchmarks_smoke.py::test_convergence_benchmark_writes_curves",
    "tests/test_benchmarks_smoke.py::test_overhead_benchmark_runs_side_by_side",
    "tests/test_benchmarks_smoke.py::test_optimizer_step_benchmark_counts_and_times",
    "tests/test_bench_scale.py::test_timeline_of_every_rank_on_one_clock",
    "tests/test_bench_scale.py::test_the_compute_comes_from_the_loop_the_slowdowns_are_ratios_of",
    "tests/test_bench_scale.py::test_scale_harness_runs_two_ranks_per_host_and_writes_results",
    "tests/test_bench_lm_field.py::test_rounds_bounded_in_time_run_with_a_slow_host",
    "tests/test_bench_lm_field.py::test_a_slow_host_runs_beside_equal_speeds",
    "tests/test_bench_lm_field.py::test_rounds_of_inner_steps_are_evaluated_after_their_merges",
    "tests/test_bench_lm_field.py::test_torchft_streaming_diloco_runs_as_a_peer",
    "tests/test_bench_lm_smoke.py::test_sharded_lm_benchmark_runs_against_hsdp_and_the_zero_communication_limit",
    "tests/test_bench_lm_smoke.py::test_lm_benchmark_runs_and_writes_results",
    "tests/test_bench_message_count.py::*",
    "tests/test_bench_eager_updates.py::*",
    "tests/test_bench_sparseloco_codec.py::test_the_round_cost_benchmark_runs_every_arm_in_a_job_of_its_own",
    "tests/test_plugin_guide_package.py::*",
    "tests/test_requirements_compat.py::test_pip_resolver_installs_nothing_for_the_originals_requirements",
    "tests/test_native_policy.py::test_python_policy_end_to_end_gives_the_same_bytes",
    "tests/test_compat_launch.py::test_original_style_script_under_the_original_launcher[*",
    "tests/test_compat_launch.py::test_run_launcher_too",
    "tests/test_compat_launch.py::test_local_rank_shim_passes_local_rank_as_the_original",
    "tests/test_cli.py::test_main_job_*",
    "tests/test_cli.py::test_run_*",
    "tests/test_cli_help.py::test_every_fault_tolerant_option_is_listed[*",
    "tests/test_cli_help.py::test_train_help_*",
    "tests/test_launch_failure_message.py::*",
    "tests/test_failure_propagation.py::test_a_process_exits_cleanly_while_its_watchdog_polls",
    "tests/test_failure_propagation.py::test_bagua_run_names_the_first_failure",
    "tests/test_failure_propagation.py::test_every_rank_names_the_rank_that_failed[*",
    "tests/test_elastic.py::test_killed_worker_is_restarted_and_resumes_from_the_last_checkpoint",
    "tests/test_elastic.py::test_bagua_run_rejects_a_bad_config_before_starting",
    "tests/test_checkpoint.py::test_kill_during_save_keeps_previous_checkpoint[*",
    "tests/test_single_node.py::test_train_on_one_node_runs_the_flat_variant_unless_told",
    "plugins_example/tests/test_local_sgd.py::test_cli_lists_it_and_checks_its_config",
    "tests/test_core_import_graph.py::test_importing_bagua_leaves_out_what_only_sharded_models_need",
    # sharding: test_sharded's equality with torch HSDP stays quick
    "tests/test_sharded_algorithms.py::*",
    "tests/test_sharded_checkpoints.py::*",
    "tests/test_sharded.py::*",
    # fault tolerance: gradient_allreduce's cells stay quick (every algorithm's are in the full suite)
    "tests/test_fault_matrix.py::test_cell[*",
    "tests/test_fault_tolerant_matrix.py::*",
    "tests/test_managed_group_release.py::test_an_operations_future_completes_with_the_operation",
    "tests/test_managed_group_release.py::test_a_failed_replica_releases_its_group_so_waiting_peers_fail_at_once",
    # the second and further cases of an algorithm's oracle tests
    "tests/test_amp.py::*",
    "tests/test_agreement.py::test_lightning_strategy_disagreements_raise_on_every_rank",
    "tests/test_agreement.py::test_decentralized_dp_wrapper_disagreements_raise_on_every_rank",
    "tests/test_algorithm_options.py::test_bad_options_raise_on_every_rank",
    "tests/test_checkpoint_resume.py::test_resume_equals_an_uninterrupted_run[*",
    "tests/test_bytegrad.py::test_*[*",
    "tests/test_bytegrad_exact.py::test_exact_world_of_*",
    "tests/test_async_model_average.py::test_*",
    "tests/test_diloco_timed.py::test_equals_the_reference[*",
    "tests/test_diloco_timed.py::test_equal_samples_are_rounds_of_inner_steps_bit_for_bit[*",
    "tests/test_diloco_timed.py::test_a_replica_healed_mid_round_merges_with_weight_zero",
    "tests/test_diloco.py::test_equals_the_reference[*",
    "tests/test_diloco.py::test_a_skipped_optimizer_step_syncs_at_the_next_forward",
    "tests/test_diloco.py::test_restore_sends_the_exchange_in_flight_again[*",
    "tests/test_diloco.py::test_checkpoint_resumes_exactly_with_an_exchange_in_flight",
    "tests/test_diloco.py::test_more_fragments_than_tensors_fails_on_every_rank",
    "tests/test_sparseloco.py::test_*",
    "tests/test_nonfinite.py::test_grad_scaler_skips_the_same_step_on_every_rank[*",
    "tests/test_nonfinite.py::test_qadam_under_grad_scaler_is_qadam",
    "tests/test_nonfinite.py::test_a_chunk_with_inf_arrives_as_nan_on_every_rank[*",
    "tests/test_gradient_allreduce.py::test_equals_ddp_and_ranks_identical[*",
    "tests/test_gradient_allreduce.py::test_equals_ddp_with_allreduces_in_flight[False]",
    "tests/test_gradient_allreduce.py::test_ignore_list_and_switching_algorithm",
    "tests/test_gradient_allreduce.py::test_small_gradients_accumulate_in_their_bucket_slots",
    "tests/test_auto.py::test_single_node_is_the_groups_membership",
    "tests/test_auto.py::test_autotune_tunes_the_choice_after_it_is_made",
    "tests/test_auto.py::test_the_link_over_loopback_is_what_loopback_can_do",
    "tests/test_autotune.py::test_bucket_size_decided_by_the_slowest_rank_and_fixed",
    "tests/test_autotune.py::test_hierarchical_tuned_on_two_nodes_and_configure",
    "tests/test_powersgd.py::test_*[*",
    "tests/test_powersgd.py::test_checkpoint_resumes_bit_for_bit",
    "tests/test_low_precision_decentralized.py::test_*",
    "tests/test_decentralized.py::test_equals_reference[*",
    "tests/test_decentralized.py::test_exchange_stays_in_flight_in_pieces",
    "tests/test_qadam.py::test_qadam[*",
    "tests/test_op_objects.py::test_each_impl_appends_its_imported_op[*",
    "tests/test_compression_option.py::test_algorithms_train_with_a_codec_option[*",
    "tests/test_compression_option.py::test_low_precision_decentralized_ring_with_a_codec_is_the_reference_3_ranks",
    "tests/test_process_group.py::test_torch_to_bagua_pg_map_empties_when_torch_destroys_its_groups",
    "tests/test_process_group.py::test_uneven_nodes",
)

QUICK = (
    "tests/test_fault_matrix.py::test_cell[gradient_allreduce-*",
    "tests/test_fault_tolerant_matrix.py::test_kill_replica_mid_step[gradient_allreduce]",
    "tests/test_fault_tolerant_matrix.py::test_killed_replica_restarted[gradient_allreduce]",
    "tests/test_sharded.py::test_gradient_allreduce_on_shards_equals_torch_hsdp[2-2]",
    "tests/test_launch_failure_message.py::test_last_error_picks_the_last_traceback",
    "tests/test_launch_failure_message.py::test_the_same_error_on_two_ranks_is_one_failure_in_a_few_lines",
    "tests/test_failure_propagation.py::test_every_rank_names_the_rank_that_failed[2-0]",
    "tests/test_checkpoint_resume.py::test_resume_equals_an_uninterrupted_run[gradient_allreduce]",
    "tests/test_bytegrad.py::test_compressed_allreduce[2-2-True]",
    "tests/test_bytegrad.py::test_bytegrad_training[3-3-bytegrad-10485760]",
    "tests/test_async_model_average.py::test_async_scenario",
    "tests/test_async_model_average.py::test_a_round_weights_the_samples_trained_so_far[first0-second0-sizes0]",
    "tests/test_diloco_timed.py::test_equals_the_reference[diloco, 2 replicas-courier]",
    "tests/test_diloco_timed.py::test_equals_the_reference[diloco, 2 replicas-fault-tolerant lockstep]",
    "tests/test_diloco_timed.py::test_equals_the_reference[sparseloco, 2 replicas-courier]",
    "tests/test_diloco.py::test_equals_the_reference[diloco]",
    "tests/test_diloco.py::test_equals_the_reference[diloco+ScaledSign+ef]",
    "tests/test_diloco.py::test_equals_the_reference[streaming+MinMaxUInt4]",
    "tests/test_sparseloco.py::test_at_32_bits_equals_the_reference[default chunks, 3 replicas]",
    "tests/test_sparseloco.py::test_a_joiner_heals_theta_global_and_starts_with_an_empty_accumulator",
    "tests/test_nonfinite.py::test_grad_scaler_skips_the_same_step_on_every_rank[gradient_allreduce]",
    "tests/test_gradient_allreduce.py::test_equals_ddp_and_ranks_identical[2-None-gradient_allreduce-True-10485760]",
    "tests/test_gradient_allreduce.py::test_equals_ddp_and_ranks_identical[4-2-algorithm3-True-512]",
    "tests/test_powersgd.py::test_equals_torch_powersgd_hook_on_one_bucket[2]",
    "tests/test_low_precision_decentralized.py::test_equals_reference[4-2-cases0]",
    "tests/test_decentralized.py::test_equals_reference[2-2-cases0]",
    "tests/test_qadam.py::test_qadam[2-2-True-False]",
    "tests/test_op_objects.py::test_each_impl_appends_its_imported_op[spec0-expected0]",
    "tests/test_compression_option.py::test_algorithms_train_with_a_codec_option[spec0]",
)


COLLECTED = pytest.StashKey[dict[str, bool]]()
"""In ``config.stash``: every test this session collected, and whether it is slow (``tests/conftest.py``)."""


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def matches(nodeid: str, pattern: str) -> bool:
    """Whether a pattern of this module names the test ``nodeid``."""
    return _regex(pattern).fullmatch(nodeid) is not None


def is_slow(nodeid: str) -> bool:
    """Whether ``-m "not slow"`` leaves this test out (besides the ``slow`` marks written on tests)."""
    return any(matches(nodeid, p) for p in SLOW) and not any(matches(nodeid, p) for p in QUICK)
