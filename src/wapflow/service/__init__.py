"""The rows people look at (runs, reports, kept branches, history, Nessie commits), in one place.

The CLI renders them and a dashboard can call the same functions. Each submodule imports only what its
data needs: `service.runs` reads the run store alone (no Spark, no JVM), `service.nessie` talks HTTP to
Nessie, `service.tables` needs a `Lakehouse`. This package imports none of them, so importing one never
starts another's dependencies.
"""
