"""`toolfleet db upgrade`: bring the database's schema (journal, conversations) to the newest revision."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.cli.commands._command import add_command
from workers.settings import Settings, redact_url

HELP = "manage the database schema of the journal and the conversation store"
DESCRIPTION = (
    HELP.capitalize() + ". The tables are managed with Alembic; a database whose tables "
    "were made before migrations is recognised and upgraded in place, its rows kept."
)
UPGRADE_HELP = "upgrade the schema to the newest revision (what every process also does at start)"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "db", HELP, DESCRIPTION)
    actions = parser.add_subparsers(dest="db_command", metavar="ACTION")
    actions.required = True
    upgrade = actions.add_parser("upgrade", help=UPGRADE_HELP, description=UPGRADE_HELP.capitalize() + ".")
    upgrade.add_argument(
        "--database-url",
        default=None,
        metavar="URL",
        help="the database (default: TOOLFLEET_DATABASE_URL, else sqlite:///toolfleet.db)",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator._database_url import database_engine
    from orchestrator.saga.migrations import upgrade

    url: str = args.database_url or settings.database_url
    engine = database_engine(url)
    try:
        report = upgrade(engine)
    finally:
        engine.dispose()
    print(f"{redact_url(url)}: {report.describe()}")
    return 0
