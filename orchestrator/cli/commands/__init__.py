"""The `toolfleet` command's subcommands: each module adds its parser and says how to run it.

A module exposes `add_parser(commands)` returning the subparser, and `run(args, settings) -> int`.
"""
