"""`python -m sqltransport_schema.cli`, as the sqltransport-schema script."""

import sys

from . import main

sys.exit(main())
