"""Runs: what every wap run did, recorded durably (the ledger and dashboard build on it)."""
