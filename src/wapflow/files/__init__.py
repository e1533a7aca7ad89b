"""A run's files, before Spark: what was named, what Spark is given for it, and checks by name and content.

- resolve: patterns, folders, globs and S3 URIs -> the run's files (RunFiles), refusing what cannot be read
- spark_paths: the exact paths Spark is given (links for local names it would mangle), and back from its messages
- access: local and S3 bytes of a file (the head a check reads; decompression)
- text_checks, parquet_checks: a batch checked before Spark reads it (encoding, CSV header, JSON lines, footers)
- locate: where in a local file a record Spark refused is (line, column), for the error message

Nothing here starts Spark; reading the files with Spark is wapflow.writing.read.
"""
