"""Pure-Python tests: no JVM, no Spark (tests/unit/conftest.py makes starting one fail); `make test-fast`."""
