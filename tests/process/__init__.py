"""Tests through real processes: `wap` commands, servers, killed processes, a browser."""
