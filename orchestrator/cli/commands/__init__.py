"""The `toolfleet` command's subcommands: each module adds its parser and says how to run it.

A module exposes `add_parser(commands)` returning the subparser, and `run(args, settings) -> int`. A
command whose name has a hyphen lives in the module of that name with an underscore
(`worker-health`: `worker_health.py`).
"""
