"""Adapters for the orchestrators people already run (optional extras)."""
