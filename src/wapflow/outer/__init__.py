"""The outer loop: every landed file published exactly once (ingest; triggers and durable runs build on it)."""
