"""`python -m wapflow.cli ...`: the same as the `wap` console script."""

from wapflow.cli import main

main()
