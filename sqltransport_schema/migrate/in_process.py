"""`alembic upgrade` run inside this process on one database, for callers that upgrade many (the
fleet): the project's own migrations/env.py (its locks, refusals and consent -x options) with the
ScriptDirectory already loaded, which `alembic.command.upgrade` would read again for every database.

The project's uses of Alembic names that are not public live here, each once: `ScriptDirectory.
_upgrade_revs` (the steps from a revision to the destination, which `alembic.command.upgrade` itself
calls) and the `alembic.context` proxy's `_proxy` (the running EnvironmentContext, to tell an upgrade
from a downgrade or a stamp). Alembic has kept both since its early releases; tests/test_layers.py
holds that no other module reaches into Alembic's private names, and the fleet's and the upgrade's
tests run them on the installed release.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import errors

# config.attributes[STEP_HOOKS]: more on_version_apply callables for env.py, e.g. one that counts the steps a run took
STEP_HOOKS = "sqltransport_on_version_apply"

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory


def upgrade_steps(script: ScriptDirectory, destination: str, current: Any) -> Any:
    """The steps from `current` (the database's heads) to `destination`, as Alembic's upgrade takes them."""
    steps = getattr(script, "_upgrade_revs", None)
    if steps is None:  # an Alembic release that renamed it
        import alembic

        raise errors.Unsupported(f"this Alembic release ({alembic.__version__}) has no ScriptDirectory._upgrade_revs; install alembic<2")
    return steps(destination, current)


def is_upgrade(context: Any) -> bool:
    """Whether the running EnvironmentContext (or the `alembic.context` proxy of it) runs an upgrade:
    its migration function is Alembic's `upgrade` (or this module's)."""
    instance = context if hasattr(context, "context_opts") else getattr(context, "_proxy", None)
    fn = getattr(instance, "context_opts", {}).get("fn")
    return fn is not None and fn.__name__ == "upgrade"


def upgrade(
    config: Config,
    script: ScriptDirectory,
    url: str,
    destination: str,
    x: Sequence[str] = (),
    rerun: Callable[[list[str]], str] | None = None,
) -> int:
    """Upgrade the database at `url` to `destination` through the project's env.py; the number of steps
    taken. x: more -x options (role=..., consents); rerun: the command that runs this one again with
    more -x options, for a refusal's advice."""
    from alembic.runtime.environment import EnvironmentContext

    from .refusals import RERUN_OPTION

    config.cmd_opts = argparse.Namespace(quiet=True, x=[f"url={url}", *x])
    if rerun is not None:
        config.attributes[RERUN_OPTION] = lambda added, opts: rerun(added)
    steps: list[object] = []
    config.attributes[STEP_HOOKS] = [lambda ctx, step, heads, run_args: steps.append(step)]

    def upgrade(current: Any, context: Any) -> Any:  # named as Alembic's own: is_upgrade() tells it by name
        return upgrade_steps(script, destination, current)

    with EnvironmentContext(
        config,
        script,
        fn=upgrade,
        as_sql=False,
        starting_rev=None,
        destination_rev=destination,
        tag=None,
    ):
        script.run_env()
    return len(steps)
