"""Alembic's environment for wapflow's tables: always run programmatically (wapflow.runs.schema), on the
connection it passes, with wapflow's own version table so a database shared with other Alembic users (one
PostgreSQL for several apps) keeps theirs apart."""

from __future__ import annotations

from alembic import context

from wapflow.runs.schema import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    version_table=VERSION_TABLE,
    render_as_batch=True,  # SQLite alters a table by copying it (batch mode)
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
