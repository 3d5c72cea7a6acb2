"""Deprecated: the live bus's status is `sqltransport_schema.runtime.status` now ("operations" meant three
things), and retry is `sqltransport_schema.errorqueue.retry`. This module re-exports status's names for
code written against 0.1.0; it goes in a later release (CHANGELOG)."""

from __future__ import annotations

from .status import *  # noqa: F403 - the old import path, unchanged
from .status import __all__  # noqa: F401
