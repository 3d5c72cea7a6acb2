"""The PostgreSQL transport's own installer DDL (transport-facts §7), as it runs for Sales and error."""

from __future__ import annotations

INSTALLER = [
    f'CREATE TABLE IF NOT EXISTS "public"."{q}" '
    "(Id uuid NOT NULL PRIMARY KEY, Expires TIMESTAMP, Headers TEXT NOT NULL, Body BYTEA, Seq serial NOT NULL UNIQUE)"
    for q in ("Sales", "error")
] + [
    'CREATE TABLE IF NOT EXISTS "public"."Sales.Delayed" (Id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY, '
    "Headers text NOT NULL, Body bytea, Due timestamptz NOT NULL) WITH (fillfactor=100)",
    'CREATE INDEX IF NOT EXISTS "Sales.Delayed_Due" on "public"."Sales.Delayed"(Due)',
    'CREATE TABLE IF NOT EXISTS "public"."SubscriptionRouting" (QueueAddress VARCHAR(200) NOT NULL, '
    "Endpoint VARCHAR(200) NOT NULL, Topic VARCHAR(200) NOT NULL, PRIMARY KEY (Endpoint, Topic)) WITH (fillfactor=100)",
]
