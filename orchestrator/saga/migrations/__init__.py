"""toolfleet's SQL schema under Alembic: the journal's and the conversation store's tables.

`ensure_schema(engine)` runs when a `Journal` or `SqlChatMemoryStore` is built, and
`toolfleet db upgrade` runs `upgrade()`: both bring the database to the newest revision under a
lock (see `_lock`), so any number of processes may start at once on a fresh database. A database
whose tables were made before migrations existed (tables present, no version row) is recognised:
its tables and rows are kept and it is marked at the baseline revision. A database at a revision
this toolfleet does not know (a newer one's) is started on by `ensure_schema` with a warning, so
older processes keep running through a rolling deploy or a rollback; `upgrade()` refuses it.

Alembic is configured in code (no alembic.ini); the revisions are modules of `versions/`. A new
revision is a module there whose `down_revision` is the previous head; it must leave the database
matching the models (`tests/orchestrator/test_migrations.py` compares them).
"""

from orchestrator.errors import SchemaError
from orchestrator.saga.migrations._schema import TABLES, VERSION_TABLE
from orchestrator.saga.migrations._upgrade import SchemaUpgrade, ensure_schema, head, upgrade

__all__ = ["TABLES", "VERSION_TABLE", "SchemaError", "SchemaUpgrade", "ensure_schema", "head", "upgrade"]
