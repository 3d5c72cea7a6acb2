"""fleet script: the reviewed deployment script of each target (scripts.render), named for it.

Targets at the same revision on the same engine get the same script, so each (engine, revision)
is rendered once; each file's first lines name its target (the URL's password masked)."""

from __future__ import annotations

from pathlib import Path

from .file import Target
from .work import Migrations, describe


def write_scripts(
    migrations: Migrations, targets: list[Target], folder: Path, config_path: str
) -> tuple[list[Path], list[str], list[tuple[str, str]]]:
    """(files written, targets at the revision, (target, error) of those that failed)."""
    from sqlalchemy.engine import make_url

    from .. import scripts
    from ..db import normalise_url
    from ..engines import for_sqlalchemy

    configured = migrations.config.get_main_option("sqltransport.topology")
    topology = Path(migrations.config.config_file_name).parent / configured if configured else Path("topology.yaml")
    rendered: dict[tuple[str, tuple[str, ...]], str] = {}
    written, skipped, failed = [], [], []
    folder.mkdir(parents=True, exist_ok=True)
    to_rev = ",".join(migrations.destination) or "base"
    for target in targets:
        try:
            stamps = migrations.stamps(target.url)
            if stamps == migrations.destination:
                skipped.append(target.name)
                continue
            engine = for_sqlalchemy(make_url(normalise_url(target.url)).get_backend_name()).name
            key = (engine, stamps)
            if key not in rendered:
                from_rev = ",".join(stamps) or None
                request = scripts.ScriptRequest(engine, from_rev, migrations.settings.to_rev, topology)
                rendered[key] = scripts.render(migrations.config, request)
            path = folder / f"{target.name}.sql"
            comment = "--"
            head = f"{comment} target: {target.name} ({target.shown_url}), from {','.join(stamps) or '<base>'} to {to_rev}\n"
            path.write_text(head + rendered[key], encoding="utf-8")
            written.append(path)
        except Exception as error:  # noqa: BLE001 - one target's failure is its line
            failed.append((target.name, describe(error, target, migrations.settings.describe)))
    return written, skipped, failed
