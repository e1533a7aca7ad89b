"""SQL text wapflow builds: table, branch and column names validated and quoted (identifiers).

The lowest layer above errors: wap.toml's model (wapflow.config) validates the names it is given with it,
and every package that writes SQL (lakehouse, audit, write, pipeline) quotes with it.
"""
