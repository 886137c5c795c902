"""Alembic's migration environment for toolfleet's tables, configured in code (no alembic.ini).

`orchestrator.saga.migrations.upgrade()` passes an open connection in `config.attributes["connection"]`,
inside the transaction that holds the migration lock. Run by hand (`alembic` with a config whose
`sqlalchemy.url` is set), it opens its own connection.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from sqlalchemy.engine import Connection

from orchestrator.saga.migrations._schema import VERSION_TABLE, target_metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata(),
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("toolfleet's migrations need a connection or the sqlalchemy.url option")
    engine = sa.create_engine(url)
    try:
        with engine.begin() as own_connection:
            _run(own_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("toolfleet's migrations run against a database, not as an SQL script")
_main()
