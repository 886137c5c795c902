"""Benchmarks with targets: `make bench` prints a table and writes JSON under `bench/results/`."""
