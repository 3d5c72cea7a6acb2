"""Values read per the format -> the Topology model (entries that could not be read are left out)."""

from __future__ import annotations

from typing import Any

from ..schema import Correlation
from .format import DEFAULT_DELAYED_SUFFIX, FORMAT
from .model import Endpoint, Placed, Queue, Saga, Source, Topology
from .problems import Mark
from .reader import Obj


def _placed(
    cls: type[Placed], obj: Obj, key: str, defaults: tuple[str | None, str | None], item_marks: dict[str, Mark] | None = None, **extra
) -> Any:
    schema = obj.get("schema", defaults[0])
    catalog = obj.get("catalog", defaults[1])
    return cls(obj.get(key), schema, catalog, obj.mark, {**obj.marks, **(item_marks or {})}, **extra)


def _complete(items: list, key: str) -> list:
    """The entries of a list whose required key was read (the rest are already reported)."""
    return [(obj, mark) for obj, mark in items if obj.get(key) is not None]


def _correlation_of(obj: Obj | None) -> Correlation | None:
    if obj is None or obj.get("name") is None or obj.get("type") is None:
        return None
    return Correlation(obj.get("name"), obj.get("type"))


def _saga(obj: Obj) -> Saga:
    marks = dict(obj.marks)
    for key in ("correlation", "transitional"):
        sub = obj.get(key)
        if sub is not None:
            marks.update({f"{key}.{k}": m for k, m in sub.marks.items()})
    return Saga(
        obj.get("name"),
        obj.get("table_suffix"),
        _correlation_of(obj.get("correlation")),
        _correlation_of(obj.get("transitional")),
        obj.mark,
        marks,
    )


def build(root: Obj, path: str, files: tuple[Source, ...] = ()) -> Topology:
    defaults = (root.get("default_schema"), root.get("default_catalog"))
    endpoints = tuple(
        _placed(
            Endpoint,
            obj,
            "name",
            defaults,
            instances=tuple(value for value, _ in obj.get("instances", [])),
            item_marks={f"instances[{i}]": m for i, (_, m) in enumerate(obj.get("instances", []))},
            delayed_delivery=obj.get("delayed_delivery"),
            send_only=obj.get("send_only", False),
            body_string=obj.get("body_string", False),
            protected=obj.get("protected"),
            table_prefix=obj.get("table_prefix"),
            sagas=tuple(_saga(saga) for saga, _ in _complete(obj.get("sagas", []), "name")),
            outbox=obj.get("outbox", False),
        )
        for obj, _ in _complete(root.get("endpoints", []), "name")
    )
    subscriptions = root.get("subscriptions")
    if isinstance(subscriptions, Obj) and subscriptions.get("table") is None:
        subscriptions = False  # unreadable (already reported): check the rest as if there were none
    engines = root.get("engines")
    pg = root.get("postgresql")
    tenants = root.get("tenants")
    tenant_tables = tenants.get("tables", []) if tenants is not None else []
    action_log = root.get("action_log")
    return Topology(
        path=path,
        transport_version=root.get("transport_version"),
        engines=tuple(value for value, _ in engines) if engines is not None else tuple(FORMAT.fields["engines"].default),
        default_schema=defaults[0],
        default_catalog=defaults[1],
        delayed_table_suffix=root.get("delayed_table_suffix", DEFAULT_DELAYED_SUFFIX),
        subscriptions=_placed(Placed, subscriptions, "table", defaults) if isinstance(subscriptions, Obj) else None,
        subscriptions_disabled=subscriptions is False,
        postgresql_seq_type=pg.get("seq_type", "serial") if pg is not None else "serial",
        endpoints=endpoints,
        queues=tuple(
            _placed(Queue, obj, "name", defaults, protected=obj.get("protected"), archive=obj.get("archive"))
            for obj, _ in _complete(root.get("queues", []), "name")
        ),
        discard=tuple(_placed(Placed, obj, "name", defaults) for obj, _ in _complete(root.get("discard", []), "name")),
        drop_protected=tuple(_placed(Placed, obj, "name", defaults) for obj, _ in _complete(root.get("drop_protected", []), "name")),
        postgresql_online_rewrites=bool(pg.get("online_rewrites", False)) if pg is not None else False,
        tenant_tables=tuple(value for value, _ in tenant_tables),
        action_log=_placed(Placed, action_log, "table", defaults) if isinstance(action_log, Obj) and action_log.get("table") else None,
        marks={
            **root.marks,
            "engines_items": [m for _, m in engines] if engines else [],
            "tenants_items": [m for _, m in tenant_tables],
        },
        files=files,
    )
