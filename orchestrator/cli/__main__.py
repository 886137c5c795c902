"""`python -m orchestrator.cli`: the `toolfleet` command."""

import sys

from orchestrator.cli.main import main

sys.exit(main())
