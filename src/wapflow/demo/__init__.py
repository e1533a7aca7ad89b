"""The demo: synthetic taxi trips and a two-file WAP run on the embedded lakehouse."""
