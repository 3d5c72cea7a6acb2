"""The grants side of an engine: the neutral base of each engine's nested `Grants`.

An engine's grants section (`PostgreSQL.Grants`, `MSSQL.Grants`; the instance is `dialect.grants`)
turns a `grants.GrantPlan` into the GRANT statements (and comments) `sqltransport-schema grants`
prints. It quotes through its dialect (`self.dialect`), so names reach SQL text the one way.
Engines that generate no grants keep this base and say why in `unsupported`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import errors

if TYPE_CHECKING:
    from ..grants import GrantPlan
    from .base import Dialect


class Grants:
    """What every engine's grants section provides."""

    # Why this engine has nothing to grant (printed instead of statements), or None.
    unsupported: str | None = None
    # The same for a monitoring login (grants --monitor), whose advice differs: reads only.
    unsupported_monitor: str | None = None

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def runtime(self, plan: GrantPlan, role: str) -> list[str]:
        """The GRANT statements (and comments) a runtime login needs for a grants.GrantPlan."""
        raise errors.Unsupported(f"grants are not supported on {self.dialect.name}")

    def installer(self, plan: GrantPlan, role: str) -> list[str]:
        """What the installer/migration login needs for a grants.GrantPlan."""
        raise errors.Unsupported(f"grants are not supported on {self.dialect.name}")

    def monitor(self, plan: GrantPlan, role: str) -> list[str]:
        """What a monitoring login needs (status in every format, an exporter of it, check) for a grants.GrantPlan: reads only."""
        raise errors.Unsupported(f"grants are not supported on {self.dialect.name}")
