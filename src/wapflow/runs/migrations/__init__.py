"""Alembic migrations of wapflow's own tables (the run store, the file ledger, alert deliveries); applied by
wapflow.runs.schema.ensure_schema, never by hand. Each revision is frozen DDL: the models in runs/*.py
describe the head, and tests/unit/test_schema.py checks that head's tables match them."""
