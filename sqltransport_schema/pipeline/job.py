"""spark-submit entry point: `spark-submit [--master URL] .../sqltransport_schema/pipeline/job.py move --from-url ...`.

The arguments are those of `sqltransport-schema pipeline ...`; the session spark-submit made is used.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from sqltransport_schema.cli import main as cli_main

    return cli_main(["pipeline", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
