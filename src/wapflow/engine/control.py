"""What `wap engine status|stop|logs` read and do: the engines of this user, one configuration's (its scope: the
wap.toml path, whatever the key its engine started with)."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wapflow.engine.runtime import (
    EnginePaths,
    config_path,
    engine_key,
    engine_setting,
    engines,
    memory_bytes,
    runtime_dir,
    scope_of,
)
from wapflow.lakehouse.processes import alive, children, terminate


def key_for(config: str | None) -> str:
    """The key a `wap` command on `config` (None: as the CLI finds it) would use from this shell and folder."""
    return this_config(config)[0]


def this_config(config: str | None) -> tuple[str, str]:
    """The key and the scope of the engine a `wap` command on `config` (None: as the CLI finds it) would use
    from this shell and folder. EngineUnavailable: a named config file that does not exist."""
    cwd = os.getcwd()
    path = config_path(["--config", config] if config else [], os.environ, cwd)
    _, data = engine_setting(path)
    return engine_key(path, data, cwd, os.environ), scope_of(path, cwd)


def status(this_key: str | None, this_scope: str | None = None) -> list[dict[str, Any]]:
    """The engines running for this user: pid, key, config, started, idle for, commands, memory, its JVM;
    `this_config`: the engine's scope is `this_scope` (an engine of an earlier wap.toml too), or its key is
    `this_key`."""
    rows = []
    now = time.time()
    for doc in engines():
        pid = int(doc["pid"])
        kids = children(pid)
        commands = [k for k in kids if _same_program(k, pid)]  # forked from the engine: commands running
        rows.append(
            {
                "pid": pid,
                "key": doc.get("key"),
                "config": doc.get("config"),
                "this_config": doc.get("key") == this_key
                or (this_scope is not None and doc.get("scope") == this_scope),
                "retiring": doc.get("retiring"),
                "started": datetime.fromtimestamp(float(doc.get("started") or now), UTC).isoformat(timespec="seconds"),
                "idle_for_s": round(now - float(doc.get("last_used") or now), 1),
                "idle_stop_s": doc.get("idle_seconds"),
                "commands": doc.get("requests", 0),
                "running": len(commands),
                "memory_mb": round(memory_bytes(pid) / 2**20, 1),
                "jvm_pids": [k for k in kids if k not in commands],
                "log": doc.get("log"),
            }
        )
    return rows


def _same_program(child: int, pid: int) -> bool:
    """The child runs the engine's own executable (a command's fork), not another (its JVM)."""
    try:
        return os.readlink(f"/proc/{child}/exe") == os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False


def stop(pid: int, grace: float = 60.0) -> list[int]:
    """Stop an engine (a command it runs is stopped and resumes later) and its JVM; the pids that were ended."""
    kids = children(pid)
    terminate(pid, lambda: not alive(pid), grace=grace)
    for kid in kids:  # the JVM goes with the engine's SparkContext; only a killed engine leaves it behind
        if alive(kid):
            terminate(kid, lambda k=kid: not alive(k), grace=10.0)  # type: ignore[misc]
    return [pid, *kids]


def log_path(key: str) -> Path:
    return EnginePaths(runtime_dir(), key).log
