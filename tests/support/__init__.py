"""What the tests share but is not a test: fixtures (pytest plugins, declared in tests/conftest.py), the local
servers they start, the `wap` process harness and the data helpers. No test module imports another one."""
