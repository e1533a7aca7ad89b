"""A run store at an older revision of wapflow's migrations, as a store written by that release is: what
upgrade tests start from."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from wapflow.runs import schema


def store_at(db: Path, revision: str) -> None:
    """A SQLite run store at `db` migrated to `revision` (e.g. "0002") and no further."""
    from alembic import command
    from alembic.config import Config

    engine = sa.create_engine(f"sqlite:///{db}")
    cfg = Config()
    cfg.set_main_option("script_location", str(schema.MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    engine.dispose()
