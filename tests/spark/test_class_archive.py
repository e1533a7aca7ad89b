"""The driver JVM maps wapflow's class archive (wapflow.lakehouse.class_archive) when `wap setup` made one.

`make test` runs `wap setup` first, which trains the archive for this Java and PySpark (a real WAP run whose
JVM writes it at exit); the shared test session was then started through build_session like any command's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wapflow.config import WapConfig
from wapflow.lakehouse import class_archive, jvm

pytestmark = pytest.mark.spark


def test_the_driver_jvm_maps_the_class_archive_wap_setup_made(spark: Any) -> None:
    java = jvm.find_java()
    assert java is not None
    archive = class_archive.path_for(WapConfig(), java)
    assert archive.is_file(), f"no class archive at {archive}: `make test` runs `wap setup`, which makes it"
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8").splitlines()
    mapped = {line.split()[-1] for line in maps if ".jsa" in line}
    assert str(archive) in mapped, mapped
