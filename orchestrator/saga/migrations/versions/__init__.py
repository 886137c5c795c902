"""The schema's revisions, one module each, in Alembic's format (read by path, not imported)."""
