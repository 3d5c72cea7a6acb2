"""Tenant databases in the runtime (docs/tenants.md): which database a message's handler writes to,
chosen from its headers by the application's callable (as SQL persistence's
MultiTenantConnectionBuilder does), one engine per database, at most `max_tenant_connections` of
them open at once: the least recently used is closed first, so a pump over a few hundred tenants
holds a bounded number of connections (each engine keeps its idle connection)."""

from __future__ import annotations

import threading
from collections import OrderedDict
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

DEFAULT_MAX_TENANT_CONNECTIONS = 16


class TenantDatabases:
    """The tenant databases a pump has met: the chooser, and an engine per URL it returned, the most
    recently used `max_engines` kept (engines it returned are the caller's and are never disposed here)."""

    def __init__(self, choose: TenantDatabase, max_engines: int = DEFAULT_MAX_TENANT_CONNECTIONS):
        if not callable(choose):
            raise errors.UsageError(f"tenant_database is a callable of a message's headers returning a URL or an Engine, not {choose!r}")
        if isinstance(max_engines, bool) or not isinstance(max_engines, int) or max_engines < 1:
            raise errors.UsageError(f"max_tenant_connections is a number of databases (1 or more), not {max_engines!r}")
        self.choose = choose
        self.max_engines = max_engines
        self._engines: OrderedDict[str, Engine] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def engine(self, headers: Mapping[str, str]) -> Engine:
        chosen = self.choose(headers)
        if isinstance(chosen, Engine):
            return chosen
        if not isinstance(chosen, str):
            raise errors.UsageError(f"tenant_database returned {chosen!r}, not a URL or an Engine")
        with self._lock:
            engine = self._engines.get(chosen)
            if engine is not None:
                self._engines.move_to_end(chosen)
                return engine
        engine = make_engine(chosen, must_exist=True)  # a tenant's database is deployed, never made here
        with self._lock:
            kept = self._engines.setdefault(chosen, engine)
            self._engines.move_to_end(chosen)
            evicted = [self._engines.popitem(last=False)[1] for _ in range(len(self._engines) - self.max_engines)]
        for old in evicted + ([engine] if kept is not engine else []):
            old.dispose()  # its idle connection closes; one a handler holds closes when given back
        return kept

    def link(self, message: Message) -> TenantLink:
        """The handler's connection to the message's tenant database (connected on first use)."""
        if message.headers is None:
            raise errors.UsageError(f"message {message.id} has unreadable headers: no tenant can be chosen")
        return TenantLink(self.engine(message.headers))

    @property
    def open(self) -> int:
        """How many tenant engines are kept now."""
        return len(self._engines)

    def dispose(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for engine in engines:
            engine.dispose()
