"""Audit: declarative checks over the rows a run added, evaluated in one Spark pass."""
