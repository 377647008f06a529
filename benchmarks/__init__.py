"""Benchmarks of bagua against torch DDP: end-to-end on emulated hosts, convergence, micro-benchmarks.

    make bench              # e2e on netns-emulated hosts (root), writes results/e2e.{md,json,png}
    make bench-convergence  # loss/accuracy against wall-clock time, results/convergence.{md,png}
    make bench-smoke        # a few seconds on loopback: checks that everything runs
"""
