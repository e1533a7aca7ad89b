"""Tests on the one shared SparkSession of the test session: runs in this process."""
