"""The warm wapflow engine: one background process per configuration that keeps a SparkSession, so that `wap`
commands needing Spark skip the JVM's start (docs/guides/engine.md).

runtime.py   the per-user runtime folder, the engine key, the engine's files     protocol.py  the socket's frames
client.py    the `wap` side: hand a command over, or start the engine             server.py    the engine process
control.py   what `wap engine status|stop|logs` read and do
"""
