"""The lakehouse: Spark session, Iceberg catalog, tables and their branches."""
