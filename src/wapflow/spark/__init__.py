"""What wapflow knows of Spark without building a session: which kind of session a caller holds (kind) and
what Spark's and Iceberg's exceptions mean (errors).

Leaf modules (they import nothing of wapflow but errors), below wap.toml's model: the audit, whose check
types are part of that model, asks them; the session builder and everything above it do too.
"""
