"""Whether the Spark tests may run here, and the shared Spark session.

One Spark session (local[2]) serves the whole test session. Tests that need it are marked `spark`
when collected. Without the spark extra they are skipped (README's test command installs only the
`test` extra), unless SQLTRANSPORT_TEST_EXTRAS names spark: then, as with pyspark installed but no
Java under CI, they fail, so a green `.ci/run` means they ran.
"""

from __future__ import annotations

import os
import shutil

import pytest


def demanded(extra: str) -> bool:
    """The run insists on the extra (`.ci/run` sets SQLTRANSPORT_TEST_EXTRAS=spark once it installed it)."""
    return extra in os.environ.get("SQLTRANSPORT_TEST_EXTRAS", "").replace(",", " ").split()


def spark_missing() -> str | None:
    """Why the Spark tests cannot run here, or None. README's test command runs without the extra."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "needs the spark extra: pip install -e '.[test,spark]'"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java on PATH (the spark extra needs Java 17)"
    return None


def spark_session(tmp_path_factory):
    """The one local[2] session for the test run (conftest's `spark` fixture yields it)."""
    # Spark's scratch (block manager files; what a killed job leaves behind) goes under pytest's
    # own temporary folders, which it prunes, for this session and for the jobs the tests start.
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(tmp_path_factory.mktemp("spark-scratch")))
    problem = spark_missing()
    if problem is not None:
        pytest.fail(f"the Spark tests must run here: {problem}")  # collection skips them where they may not run
    from sqltransport_schema.pipeline.session import get_session

    session, _ = get_session("local[2]")
    yield session
    session.stop()
