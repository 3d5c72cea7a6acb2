"""`alembic upgrade` run inside this process on one database, for callers that upgrade many (the
fleet): the project's own migrations/env.py (its locks, refusals and consent -x options) with the
ScriptDirectory already loaded, which `alembic.command.upgrade` would read again for every database.

The one use of an Alembic API that is not public lives here: `ScriptDirectory._upgrade_revs`, the
steps from a revision to the destination, which `alembic.command.upgrade` itself calls. Alembic
has kept it since its first releases; tests/test_layers.py holds that no other module reaches into
Alembic's private names, and tests/test_fleet*.py run it on the installed release.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import errors

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

    from .env import STEP_HOOKS
    from .refusals import RERUN_OPTION

    config.cmd_opts = argparse.Namespace(quiet=True, x=[f"url={url}", *x])
    if rerun is not None:
        config.attributes[RERUN_OPTION] = lambda added, opts: rerun(added)
    steps: list[object] = []
    config.attributes[STEP_HOOKS] = [lambda ctx, step, heads, run_args: steps.append(step)]
    with EnvironmentContext(
        config,
        script,
        fn=lambda current, context: upgrade_steps(script, destination, current),
        as_sql=False,
        starting_rev=None,
        destination_rev=destination,
        tag=None,
    ):
        script.run_env()
    return len(steps)
