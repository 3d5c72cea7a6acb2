"""fleet upgrade --master: the same per-target work (work.py) as Spark tasks.

The project's migrations travel with the job: the folder of alembic.ini (alembic.ini, the
migrations, topology.yaml) is zipped and added to the job's files, so an executor on another
machine needs only the package installed; each executor's Python worker unpacks it and loads the
migrations once (MIGRATIONS, kept while Spark reuses the worker). A stage's targets run in waves
of its parallel, one Spark job each, a target per partition (all of them at once); a wave's
failures are judged before the next starts (on_error, max_failures), so, as with the local runner,
no target starts once a stage's failures pass what it tolerates and the targets left are reported
not attempted. The driver alone writes the journal: a wave's rows when it is submitted, its
results when it ends. A task Spark runs again (a lost executor) finds its database where the
first attempt left it: at the revision (one read), or rolled back to be run again under the
database's migration lock; never migrated twice.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import uuid
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from .file import Target
from .work import Migrations, Result, Settings

if TYPE_CHECKING:
    from .journal import Journal
    from .runner import Batch

ARCHIVE = "sqltransport-fleet-migrations"
MIGRATIONS: dict[str, Migrations] = {}  # per Python worker of an executor: the archive's migrations, loaded once


def archive(config: str, folder: Path) -> Path:
    """The folder of the Alembic configuration, zipped (caches and journals left out)."""
    root = Path(config).resolve().parent
    target = folder / f"{ARCHIVE}-{uuid.uuid4().hex[:12]}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if path.is_file() and "__pycache__" not in relative.parts and not path.name.endswith((".sqlite", ".db", "-wal", "-shm")):
                zipped.write(path, relative.as_posix())
    return target


def _migrations(settings: Settings, name: str) -> Migrations:
    """On an executor: the shipped migrations, unpacked and loaded once per Python worker."""
    if name not in MIGRATIONS:
        from pyspark import SparkFiles

        folder = Path(tempfile.mkdtemp(prefix="sqltransport-fleet-"))
        with zipfile.ZipFile(SparkFiles.get(name)) as zipped:
            zipped.extractall(folder)
        config = folder / Path(settings.config).name
        MIGRATIONS[name] = Migrations(replace(settings, config=str(config)))
    return MIGRATIONS[name]


def _partition(settings: Settings, name: str) -> Callable[[Iterable[Target]], Iterator[Result]]:
    def run(targets: Iterable[Target]) -> Iterator[Result]:
        migrations = _migrations(settings, name)
        for target in targets:
            result = migrations.upgrade(target)
            result.pid = os.getpid()
            yield result

    return run


def batches(args: argparse.Namespace, migrations: Migrations, journal: Journal | None) -> Callable[[str], Batch]:
    """For each stage, the runner's batch: its targets as Spark tasks on args.master."""
    from ..pipeline.session import get_session

    spark, _ = get_session(args.master, args.conf, app_name="sqltransport-schema fleet")
    folder = Path(tempfile.mkdtemp(prefix="sqltransport-fleet-job-"))
    shipped = archive(migrations.settings.config, folder)
    context = spark.sparkContext
    context.addFile(str(shipped))
    # a name of its own per job: an executor's worker that served another job keeps that job's migrations
    name = shipped.name
    settings = migrations.settings  # its describe is a module's function: a task imports it by name

    def for_stage(stage: str) -> Batch:
        def batch(targets: list[Target], size: int, stop: Callable[[], bool]) -> Iterable[Result]:
            for start in range(0, len(targets), size):
                if stop():
                    return
                part = targets[start : start + size]
                if journal is not None:
                    for target in part:
                        journal.started(target.name, stage)
                # collect, not toLocalIterator: that runs one job per partition, one after another
                yield from context.parallelize(part, len(part)).mapPartitions(_partition(settings, name)).collect()

        return batch

    def cleanup() -> None:
        shutil.rmtree(folder, ignore_errors=True)

    for_stage.cleanup = cleanup  # type: ignore[attr-defined]
    return for_stage
