# Benchmarks (see benchmarks/README.md). `bench`, `bench-convergence`, `bench-lm*`, `bench-sharded`, `bench-slow-host`, `bench-scale` and `bench-ft` need root: they emulate
# hosts joined by a rate-limited link with the repository's benchmarks/netns/hosts.sh (network namespaces).
PYTHON ?= python
BENCH_ARGS ?=

.PHONY: bench bench-smoke bench-convergence bench-micro bench-overhead bench-lm bench-lm-internet bench-sharded bench-slow-host bench-scale bench-ft bench-network-down

bench:  ## end-to-end: DDP baselines and every algorithm at 1 and 10 Gbit/s, 1 Gbit/s + 5 ms, tiny model
	$(PYTHON) -m benchmarks.e2e $(BENCH_ARGS)

bench-scale:  ## every method on 2, 4 and 8 emulated hosts (1 and 2 ranks per host) at 100 Mbit/s, the cost model checked and projected to 128 nodes (root)
	$(PYTHON) -m benchmarks.scale $(BENCH_ARGS)

bench-ft:  ## 3 replicas at 1 Gbit/s, one killed every 60 s and every 15 s for 5 min: fault-tolerant vs fail-fast + checkpoints (root; ~55 min)
	$(PYTHON) -m benchmarks.fault_tolerance $(BENCH_ARGS)

bench-convergence:  ## loss/accuracy against wall-clock time on the digits data, 1 Gbit/s link
	$(PYTHON) -m benchmarks.convergence $(BENCH_ARGS)

bench-lm:  ## time to a target loss of a byte-level transformer LM: every method and torchft's DiLoCo, 2 hosts, 100 Mbit/s + 10 ms, 3 seeds (root; ~6 h)
	$(PYTHON) -m benchmarks.lm --networks 100mbit+10ms --seeds 3 --limit-network 1gbit $(BENCH_ARGS)

bench-lm-internet:  ## the same at an internet-like 10 Mbit/s + 50 ms one-way, 1 seed: results/lm_internet.* (root; ~2 h)
	$(PYTHON) -m benchmarks.lm --networks 10mbit+50ms --limit-network 1gbit --name lm_internet $(BENCH_ARGS)

bench-sharded:  ## the LM sharded with FSDP2 over 2 ranks per host, 2 hosts: HSDP, hosts alone, torchft's DiLoCo and every sharding algorithm, 3 seeds (root; ~5 h)
	$(PYTHON) -m benchmarks.lm --ranks-per-host 2 --hosts 2 --networks 100mbit+10ms --seeds 3 --limit-network 1gbit $(BENCH_ARGS)

bench-slow-host:  ## the LM with host 1 at half speed beside equal speeds, 2 and 3 hosts, 100 Mbit/s + 10 ms, 3 seeds: results/lm_slow_host.* (root; ~11 h)
	$(PYTHON) -m benchmarks.lm --networks 100mbit+10ms --slow-host 1:0.5 --hosts 2,3 --seeds 3 --limit-network 1gbit --eval-after-merges \
		--methods ddp,alone,diloco,diloco_timed,sparseloco,sparseloco_timed,async,async_samples $(BENCH_ARGS)

bench-micro:  ## pytest-benchmark micro-benchmarks of the hot paths
	$(PYTHON) -m pytest benchmarks -n 0 --benchmark-enable -p no:cacheprovider --benchmark-columns=min,median,mean,rounds

bench-smoke:  ## seconds, no root: checks that the benchmarks run (what CI runs)
	$(PYTHON) -m pytest tests/test_benchmarks_smoke.py tests/test_bench_lm_smoke.py tests/test_bench_lm_field.py -q

bench-overhead:  ## per-step overhead of plain / DDP / bagua / bagua_ring on the tiny model, side by side (2 local workers)
	$(PYTHON) -m bagua_cli run --standalone --nproc_per_node=2 -m benchmarks.overhead $(BENCH_ARGS)

BAGUA_HOSTS_LOCK ?= /tmp/bagua-emulated-hosts.lock

bench-network-down:  ## remove the emulated hosts a killed benchmark left behind (root; idempotent; refuses while a run holds them)
	@flock -n -E 75 $(BAGUA_HOSTS_LOCK) bash benchmarks/netns/hosts.sh down; status=$$?; \
	if [ $$status -eq 75 ]; then echo "a running benchmark holds the emulated hosts ($(BAGUA_HOSTS_LOCK)); let it finish" >&2; fi; \
	exit $$status
