"""`wap` as a spark-submit application: `spark-submit --jars ... examples/spark_submit_wap.py run TABLE FILES`.

spark-submit starts the driver JVM with `--jars` on its classpath; wapflow's session then reuses it.
"""

from wapflow.cli import main

if __name__ == "__main__":
    main()
