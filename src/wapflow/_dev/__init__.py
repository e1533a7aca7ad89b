"""Local servers for development, tests and demos: PostgreSQL, Nessie and an S3 API (moto) on 127.0.0.1.

Kept out of the runtime packages so that what a production run imports never includes a server that only
stands in for the real one on a laptop. `make pg-up`/`pg-down`, `wap nessie up|down|status`, `wap demo --s3`
and the tests start them; nothing else in wapflow imports this package (import-linter checks it).
"""
