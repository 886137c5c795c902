"""The `toolfleet` command (`orchestrator.cli:main`, also `python -m orchestrator.cli`).

- `main`: the entry point, its parser and how errors become exit statuses.
- `commands/`: one module per subcommand, each with `add_parser(commands)` and `run(args, settings)`.
- `demo`, `console`: the story `toolfleet demo` runs, and what it and `toolfleet chat` draw.
"""

from orchestrator.cli.main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
