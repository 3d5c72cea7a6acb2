"""Fleets: one migration history, many databases (tenants, environments, regions), in parallel,
staged and resumable (docs/fleets.md).

One job per module: file.py reads fleet.yaml (targets, stages; located errors) and declares its
JSON Schema; work.py is what is done to one target (read its stamp, upgrade it, report its
status), the same in a worker process and in a Spark task; pool.py runs that work in worker
processes; runner.py takes the stages in order and decides on_error; journal.py records every
attempt in SQLite; status.py reads the fleet's revisions (and drift); report.py prints it all;
exporter.py serves the fleet's status to Prometheus; scripts.py writes each target's (or each
stage's) deployment script; spark.py runs the work as Spark tasks.
"""
