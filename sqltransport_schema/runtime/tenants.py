"""Tenant databases in the runtime (docs/tenants.md): which database a message's handler writes to,
chosen from its headers by the application's callable (as SQL persistence's
MultiTenantConnectionBuilder does), one engine per database kept for the pump's life."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

from .. import errors
from ..db import make_engine
from .receiving import TenantLink

if TYPE_CHECKING:
    from .transport import Message

# headers -> the tenant database's URL or Engine
TenantDatabase = Callable[[Mapping[str, str]], str | Engine]


class TenantDatabases:
    """The tenant databases a pump has met: the chooser, and one engine per URL it returned (engines
    it returned are the caller's and are never disposed here)."""

    def __init__(self, choose: TenantDatabase):
        if not callable(choose):
            raise errors.UsageError(f"tenant_database is a callable of a message's headers returning a URL or an Engine, not {choose!r}")
        self.choose = choose
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def engine(self, headers: Mapping[str, str]) -> Engine:
        chosen = self.choose(headers)
        if isinstance(chosen, Engine):
            return chosen
        if not isinstance(chosen, str):
            raise errors.UsageError(f"tenant_database returned {chosen!r}, not a URL or an Engine")
        with self._lock:
            engine = self._engines.get(chosen)
            if engine is None:
                engine = self._engines[chosen] = make_engine(chosen, must_exist=True)  # a tenant's database is deployed, never made here
        return engine

    def link(self, message: Message) -> TenantLink:
        """The handler's connection to the message's tenant database (connected on first use)."""
        if message.headers is None:
            raise errors.UsageError(f"message {message.id} has unreadable headers: no tenant can be chosen")
        return TenantLink(self.engine(message.headers))

    def dispose(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            engine.dispose()
