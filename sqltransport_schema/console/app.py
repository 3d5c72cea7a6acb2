"""The console's Starlette application: the pages (Jinja2, autoescaped; no inline script) and the
JSON API under /api that the same views and actions answer. Endpoints that read the database are
plain functions, which Starlette runs in its thread pool (a slow read never holds up other requests). `make_app` builds it for a transport;
cli/console.py serves it with uvicorn. Every response carries security.SECURITY_HEADERS."""

from __future__ import annotations

import functools
import json
import math
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import errorqueue, errors
from ..db import database_problem, given_url, read_timeout_of, timed_out
from ..defaults import DEFAULT_ERROR_QUEUE, DEFAULT_RETRY_BATCH
from ..errorqueue import Selection
from ..runtime.status import status
from ..urls import display_url
from ..util import duration_ms
from .actions import DEFAULT_KEEP_JOBS, Actions, Job, Pace
from .chart import depth_chart
from .display import shown, when
from .security import COOKIE, CSRF_FIELD, CSRF_HEADER, OPERATOR, SECURITY_HEADERS, Access, Operator, Session

if TYPE_CHECKING:
    from alembic.config import Config

    from ..runtime.transport import Transport

HERE = Path(__file__).parent
SHOWN_WHOLE = 64 << 10
SAMPLE_INTERVAL = 60.0  # seconds between the overview's depth samples (one a minute: 60 in the hour)
OVERVIEW_CACHE = 5.0  # seconds a status report is shown again before it is read anew
RETENTION_WHO = "retention@console"  # the action log's who of the archive retention's purges
RETENTION_EVERY = 3600.0  # seconds between the retention's purges at most


def retention_every(retention_seconds: float) -> float:
    """Seconds between the archive retention's purges: a tenth of the retention, from 1 s to an hour."""
    return min(RETENTION_EVERY, max(1.0, retention_seconds / 10))


class JSONResponse(_StarletteJSON):
    """JSON with every character beyond ASCII escaped: a value holding a NUL or a lone surrogate
    (a header of the error queue) is written as its \\u escape, never as bytes UTF-8 has no form for."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


@dataclass(frozen=True)
class ConsoleSettings:
    """The console's tunables, as `console`'s options set them (one object from the command line
    to the console): `batch_size` messages a transaction of an action; `sample_interval` seconds
    between depth samples (the ring buffer holds an hour of them); `keep_jobs` finished jobs kept
    in memory (actions.Actions)."""

    batch_size: int = DEFAULT_RETRY_BATCH
    sample_interval: float = SAMPLE_INTERVAL
    keep_jobs: int = DEFAULT_KEEP_JOBS


class Console:
    """What the pages and the API share: the transport, the access rules, the actions, the samples."""

    def __init__(
        self,
        transport: Transport,
        access: Access,
        config: Config | None = None,
        error_queue: str = DEFAULT_ERROR_QUEUE,
        draw: Callable[[Any], bytes] | None = None,
        settings: ConsoleSettings = ConsoleSettings(),
    ) -> None:
        """`draw`: a status report -> the topology's SVG (the CLI's `graph`, which adds status's notes)."""
        batch_size, sample_interval, keep_jobs = settings.batch_size, settings.sample_interval, settings.keep_jobs
        self.transport, self.access, self.config, self.error_queue, self.draw = transport, access, config, error_queue, draw
        self.actions = Actions(transport, error_queue, batch_size, keep_jobs)
        self.queue = self.actions.queue  # the error queue's model: every read and action of the pages
        self.sample_interval = sample_interval
        self.samples: deque[tuple[datetime, dict[str, int]]] = deque(maxlen=max(2, math.ceil(3600 / sample_interval)) + 1)
        self._report: tuple[float, Any] | None = None
        self._lock = threading.Lock()
        self.database = display_url(given_url(transport.engine))  # as the user gave it (docs/operations.md)
        self.login_read_only = self._login_read_only()

    @property
    def queues(self) -> list[str]:
        """The addresses a retry may be sent to instead of the FailedQ: the pages' choices."""
        return self.queue.queues

    @property
    def body_string(self) -> bool:
        """Whether the error queue has BodyString (the pages then offer the body filter)."""
        return self.queue.body_string

    @property
    def read_only(self) -> bool:
        return self.access.read_only or self.login_read_only

    def _login_read_only(self) -> bool:
        """Whether the database login may not delete from the error queue (a `grants --monitor` login)."""
        return not self.queue.may_delete()

    def report(self) -> Any:
        """status's report, read at most every OVERVIEW_CACHE seconds; each read is a depth sample."""
        with self._lock:
            now = time.monotonic()
            if self._report is None or now - self._report[0] > OVERVIEW_CACHE:
                report = status(self.transport, error_queue=self.error_queue)
                self._report = (now, report)
                self._sample(report)
            return self._report[1]

    def _sample(self, report: Any) -> None:
        depths = {t.address: t.depth for t in report.tables if t.kind == "queue" and t.depth is not None}
        taken = report.taken_at
        if not self.samples or (taken - self.samples[-1][0]).total_seconds() >= 0.9 * self.sample_interval:
            self.samples.append((taken, depths))

    def sampler(self, interval: float, stop: threading.Event) -> None:
        """Read status every `interval` seconds while the console runs (the overview's last hour)."""
        while not stop.wait(interval):
            try:
                with self._lock:
                    self._report = None
                self.report()
            except Exception:  # the database away for a while: the next sample tries again
                pass

    def purge_expired(self, retention_seconds: float, who: str = RETENTION_WHO) -> int:
        """Purge the archived messages older than the retention (`console --archive-retention`), a
        batch a transaction; a purge that deleted any is written to the action log. How many it deleted."""
        self.actions.require_log()
        done = self.queue.purge(retention_seconds)(None)
        if done.moved:
            age = f"{retention_seconds:g} s"
            self.actions.log(who, "purge (retention)", f"archived more than {age} ago (--archive-retention)", done.moved)
        return done.moved

    def retention(self, retention_seconds: float, stop: threading.Event) -> None:
        """Purge by the retention at start and then every retention_every(retention_seconds) seconds while the console runs."""
        every = retention_every(retention_seconds)
        while True:
            try:
                self.purge_expired(retention_seconds)
            except Exception:  # the database away for a while: the next round tries again
                traceback.print_exc(file=sys.stderr)
            if stop.wait(every):
                return

    def edit_and_retry(self, key: int, headers: Any, body: Any, who: str, to_queue: str | None = None) -> dict:
        """ServicePulse's edit and retry: the edit checked (ErrorQueue.edit), the message with this key
        moved into the archive (the original kept), then the edited copy sent (ErrorQueue.send_edit);
        the action log says who and what changed."""
        self.actions.require_log()
        edit = self.queue.edit(key, headers, body, to_queue)
        original = edit.original
        archived = _archive(self, [original.id], "edited and retried", who, f"the original of an edit ({original.id})", None, True)
        if archived.state != "done" or archived.moved != 1:
            why = f"{archived.state}: {archived.error}" if archived.error else archived.state
            raise errors.Refused(f"the original could not be archived ({why}): nothing sent")
        new_id = self.queue.send_edit(edit)
        self.actions.log(who, "edit and retry", f"to {edit.address}: {edit.what} · ids: {original.id} {new_id}", 1)
        return {"original": original.id, "sent": new_id, "to": edit.address, "changed": edit.changed, "body_changed": edit.body_changed}

    def migrations(self) -> dict:
        """The deployed revision, the head and the drift count (check's reading), or why not known."""
        from .. import check

        try:
            engine = self.transport.engine
            found = check.run(given_url(engine), self.config, read_timeout=read_timeout_of(engine))
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        return {
            "deployed_revision": found.deployed_revision,
            "head_revision": found.head_revision,
            "unapplied_revisions": list(found.unapplied_revisions),
            "drift": [{"category": f.category, "table": f.table, "detail": f.detail} for f in found.drift],
        }

    def graph_svg(self) -> bytes:
        """The topology drawn from the live database; errors.Unavailable without Graphviz or a drawer."""
        if self.draw is None:
            raise errors.Unavailable("no drawing of the topology here")
        return self.draw(self.report())


# ------------------------------------------------------------------------------------ access
def _caller(request: Request, access: Access) -> tuple[Operator | None, Session | None]:
    """Who a request is: the operator its Authorization token names (a script), else its session's
    (the cookie, a browser), else, where no token is set, the anonymous operator."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return access.of_token(auth[7:].strip()), None
    session = access.session(request.cookies.get(COOKIE)) if access.tokens_required else None
    if session is not None:
        return session.operator, session
    return (None if access.tokens_required else access.anonymous()), None


class AccessMiddleware(BaseHTTPMiddleware):
    """Every request: a Host this console answers to (else 400), the console's own origin on every
    POST (else 403), a token or a session where tokens are set (else 401, the login page for a
    browser), the caller's CSRF value on every POST but the sign-in (else 403); the security headers
    on every response, a failure's 500 too."""

    async def dispatch(self, request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        try:
            response = await self._checked(request, call_next)
        except Exception as problem:  # the 500 keeps the headers; its stderr has the traceback
            response = _failed(request, problem, time.perf_counter() - started)
        response.headers.update(SECURITY_HEADERS)
        return response

    async def _checked(self, request: Request, call_next: Any) -> Response:
        console: Console = request.app.state.console
        access = console.access
        path = request.url.path
        host = request.headers.get("host", "")
        if not access.host_ok(host):
            return _refusal(request, 400, "the Host header names no host of this console (--allowed-host adds one)")
        if request.method == "POST" and not access.origin_ok(
            request.headers.get("origin"), request.headers.get("referer"), request.url.scheme, host
        ):
            return _refusal(request, 403, "this POST comes from a page of another origin than the console's")
        operator, session = _caller(request, access)
        request.state.operator, request.state.session = operator, session
        request.state.role = access.role_of(operator)
        request.state.csrf = access.csrf_of(session, operator)
        open_path = path.startswith("/static/") or path == "/login"
        if operator is None and not open_path:
            if path.startswith("/api/"):
                return JSONResponse({"error": "a token is needed (Authorization: Bearer TOKEN)"}, status_code=401)
            return RedirectResponse("/login", status_code=303)
        if request.method == "POST" and path != "/login" and not access.csrf_ok(request.state.csrf, await _csrf_of(request)):
            return _refusal(request, 403, f"the CSRF value is missing or wrong (the {CSRF_FIELD} form field or the X-CSRF-Token header)")
        return await call_next(request)


async def _csrf_of(request: Request) -> str | None:
    """The CSRF value of a POST: its header, else its urlencoded form's field (the body read whole
    here, which Starlette replays to the endpoint)."""
    if CSRF_HEADER in request.headers:
        return request.headers[CSRF_HEADER]
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        values = parse_qs((await request.body()).decode("utf-8", "replace")).get(CSRF_FIELD)
        return values[0] if values else None
    return None


def _failed(request: Request, problem: Exception, waited: float) -> Response:
    """A request that failed: 500, its traceback on stderr, the database's line where it was the database's;
    a read past the engine's read timeout 503, saying the seconds waited and --read-timeout (db.timed_out)."""
    said = database_problem(problem)
    bound = read_timeout_of(request.app.state.console.transport.engine)
    if said is not None and bound and timed_out(waited, bound, said) != said:
        said = timed_out(waited, bound, said)
        sys.stderr.write(f"console: {request.method} {request.url.path}: {said}\n")
        return _refusal(request, 503, said)
    traceback.print_exception(problem, file=sys.stderr)
    return _refusal(request, 500, "the console failed on this request" + (f": {said}" if said else " (its stderr says why)"))


def _refusal(request: Request, code: int, text: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": text}, status_code=code)
    return PlainTextResponse(text, status_code=code)


def _operator(request: Request) -> Response | None:
    """None if the caller may act; else the refusal."""
    console: Console = request.app.state.console
    if console.read_only:
        why = "the console runs read-only" + (
            " (the database login may not delete from the error queue)" if console.login_read_only else ""
        )
        return _refusal(request, 403, why)
    if request.state.role != OPERATOR:
        return _refusal(request, 403, "actions need an operator token (role operator: SQLTRANSPORT_CONSOLE_TOKEN, or --tokens-file's)")
    return None


def _acting(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """A handler that acts on the error queue: the refusal (403) unless the caller may act
    (_operator), else the handler called with the console after the request (the check written once)."""

    @functools.wraps(handler)
    async def checked(request: Request, *args: Any, **kwargs: Any) -> Response:
        refused = _operator(request)
        if refused is not None:
            return refused
        return await handler(request, request.app.state.console, *args, **kwargs)

    return checked


# ------------------------------------------------------------------------------------ pages
_templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True, default_for_string=True))
_templates.filters["shown"] = shown
_templates.filters["when"] = when


def _page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    console: Console = request.app.state.console
    operator = getattr(request.state, "operator", None)
    html = _templates.get_template(name).render(
        csrf=getattr(request.state, "csrf", ""),
        who=operator.name if operator is not None else None,
        signed_in=getattr(request.state, "session", None) is not None,
        csrf_field=CSRF_FIELD,
        role=request.state.role,
        read_only=console.read_only,
        database=console.database,
        tokens=console.access.tokens_required,
        queues=console.queues,
        body_string=console.body_string,
        urlencode=urlencode,
        shown_whole=SHOWN_WHOLE,
        **context,
    )
    # a value that slipped past `shown` with a lone surrogate is written as its escape, never a 500
    return HTMLResponse(html.encode("utf-8", "backslashreplace"), status_code=status_code)


def _query(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items() if v or k in _GROUP_FIELDS}


def overview(request: Request) -> Response:
    console: Console = request.app.state.console
    samples = list(console.samples)
    every = f"{console.sample_interval:g} s" if console.sample_interval != 60 else "minute"
    return _page(
        request,
        "overview.html",
        report=console.report(),
        migrations=console.migrations(),
        samples=samples,
        chart=depth_chart(samples),
        sample_every=every,
    )


def graph(request: Request) -> Response:
    console: Console = request.app.state.console
    try:
        return Response(
            console.graph_svg(),
            media_type="image/svg+xml",
            headers={"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"},
        )
    except errors.Unavailable as exc:
        return PlainTextResponse(str(exc), status_code=404)


def groups_page(request: Request) -> Response:
    console: Console = request.app.state.console
    query = _query(request)
    by = query.pop("by", "exception")
    sort = errorqueue.sort_of(query.pop("sort", None), errorqueue.GROUP_SORTS)
    filt = Selection.of(query)
    found = console.queue.groups(by, filt, sort)
    return _page(
        request,
        "groups.html",
        by=by,
        groupings=errorqueue.GROUPINGS,
        groups=found,
        filt=filt,
        query=filt.query(),
        sort=sort,
        total=sum(g.messages for g in found),
    )


def messages_page(request: Request) -> Response:
    console: Console = request.app.state.console
    query = _query(request)
    after = _int(query.pop("after", None), "after")
    sort = errorqueue.sort_of(query.pop("sort", None), errorqueue.PAGE_SORTS)
    filt = console.queue.resolved(Selection.of(query))
    found = console.queue.page(filt, after, errorqueue.PAGE_SIZE, sort)
    total = console.queue.count(filt)
    capped = total >= errorqueue.TOTAL_CAP
    return _page(request, "messages.html", page=found, filt=filt, query=filt.query(), sort=sort, total=total, capped=capped)


def message_page(request: Request) -> Response:
    console: Console = request.app.state.console
    found = console.queue.message(_int(request.path_params["key"], "key"))
    history = errorqueue.history(found, console.actions.about(found.id))
    groups = console.queue.groups_of(found.key)
    return _page(request, "message.html", message=found, history=history, groups=groups)


@_acting
async def edit_form(request: Request, console: Console) -> Response:
    """Edit and retry from a message's page: its headers (a JSON object) and body edited in the page."""
    form = await request.form()
    headers = str(form.get("headers", ""))  # a JSON object's text: the model reads it as the transport would
    key = _int(form.get("key"), "key")
    to_queue = str(form.get("to_queue", "")).strip() or None
    done = await run_in_threadpool(console.edit_and_retry, key, headers, str(form.get("body", "")), _who(request), to_queue)
    return RedirectResponse(f"/log?edited={done['sent']}", status_code=303)


@_acting
async def api_edit(request: Request, console: Console) -> Response:
    body = await _json_object(request)
    key = body.get("key")
    if not isinstance(key, int) or isinstance(key, bool):
        raise errors.UsageError("key: give the message's key (a whole number, as GET /api/failed/messages lists it)")
    to_queue = body.get("to_queue")
    if to_queue is not None and not isinstance(to_queue, str):
        raise errors.UsageError("to_queue: give a queue address (a string)")
    done = await run_in_threadpool(console.edit_and_retry, key, body.get("headers"), body.get("body"), _who(request), to_queue)
    return JSONResponse(done)


@_acting
async def retry_form(request: Request, console: Console) -> Response:
    form = await request.form()
    fields = {k: str(v) for k, v in form.items()}
    ids, what = await run_in_threadpool(_chosen, console, fields, [str(v) for v in form.getlist("id")])
    to_queue = fields.get("to_queue", "").strip() or None
    job = await run_in_threadpool(console.actions.retry, ids, _who(request), what, _rate(form.get("rate")), False, to_queue)
    return RedirectResponse(f"/jobs/{job.id}", status_code=303)


def job_page(request: Request) -> Response:
    console: Console = request.app.state.console
    return _page(request, "job.html", job=console.actions.job(_int(request.path_params["job"], "job")))


def _cancel(request: Request) -> Any:
    """The job of the path, asked to stop after its batch in hand; or the refusal."""
    refused = _operator(request)
    if refused is not None:
        return refused
    console: Console = request.app.state.console
    job = console.actions.job(_int(request.path_params["job"], "job"))
    job.cancel.set()
    return job


def cancel_form(request: Request) -> Response:
    job = _cancel(request)
    return job if isinstance(job, Response) else RedirectResponse(f"/jobs/{job.id}", status_code=303)


def log_page(request: Request) -> Response:
    console: Console = request.app.state.console
    return _page(request, "log.html", entries=console.actions.history(), jobs=console.actions.listed(), keep_jobs=console.actions.keep_jobs)


async def login(request: Request) -> Response:
    """The sign-in page (no CSRF value on it: it is open); its POST opens a session of the token's
    operator, whose random id the cookie holds."""
    console: Console = request.app.state.console
    if request.method == "GET":
        return _page(request, "login.html")
    form = await request.form()
    operator = console.access.of_token(str(form.get("token", "")))
    if operator is None:
        request.state.role = request.state.operator = request.state.session = None
        return _page(request, "login.html", status_code=401, refused=True)
    response = RedirectResponse("/", status_code=303)
    sid = console.access.open_session(operator)
    response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/")
    return response


def logout(request: Request) -> Response:
    """End the caller's session (a POST with its CSRF value); the cookie cleared."""
    console: Console = request.app.state.console
    console.access.close_session(request.cookies.get(COOKIE))
    response = RedirectResponse("/login" if console.access.tokens_required else "/", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


_FILTER_FIELDS = errorqueue.FILTER_FIELDS
_GROUP_FIELDS = {"exception_type", "exception_message", "message_type", "endpoint"}


def _matching(console: Console, fields: dict[str, str]) -> tuple[list[str], str]:
    """The ids of every message the filter fields match now, and the action log's words for them."""
    chosen = Selection.of(fields)
    return console.queue.ids(chosen if chosen.chooses else Selection(all_messages=True)), Selection.describe(chosen)


def _who(request: Request) -> str:
    """The action log's who: the operator's name and the client's address."""
    client = request.client.host if request.client else "?"
    return f"{request.state.operator.name}@{client}"


def _int(text: Any, name: str) -> Any:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except (TypeError, ValueError):
        raise errors.UsageError(f"{name}: {text!r} is not a whole number") from None


def _rate(text: Any) -> float | None:
    if text in (None, ""):
        return None
    try:
        return float(text)
    except (TypeError, ValueError):
        raise errors.UsageError(f"rate: {text!r} is not a number of batches a second") from None


# -------------------------------------------------------------------------------------- API
def api_overview(request: Request) -> Response:
    console: Console = request.app.state.console
    if request.query_params.get("only") == "status":  # the overview's live counts: no migration check each time
        return JSONResponse({"status": console.report().to_json()})
    samples = [{"taken_at": at.isoformat(), "depths": depths} for at, depths in console.samples]
    return JSONResponse(
        {"status": console.report().to_json(), "migrations": console.migrations(), "samples": samples, "read_only": console.read_only}
    )


def api_groups(request: Request) -> Response:
    console: Console = request.app.state.console
    query = _query(request)
    by = query.pop("by", "exception")
    sort = errorqueue.sort_of(query.pop("sort", None), errorqueue.GROUP_SORTS)
    found = console.queue.groups(by, Selection.of(query), sort)
    return JSONResponse({"by": by, "sort": sort, "total": sum(g.messages for g in found), "groups": [g.to_json() for g in found]})


def api_messages(request: Request) -> Response:
    console: Console = request.app.state.console
    query = _query(request)
    after = _int(query.pop("after", None), "after")
    limit = _int(query.pop("limit", None), "limit")
    limit = errorqueue.PAGE_SIZE if limit is None else limit
    sort = errorqueue.sort_of(query.pop("sort", None), errorqueue.PAGE_SORTS)
    filt = console.queue.resolved(Selection.of(query))
    found = console.queue.page(filt, after, limit, sort)
    total = console.queue.count(filt)
    return JSONResponse(found.to_json() | {"sort": sort, "total": total, "total_capped": total >= errorqueue.TOTAL_CAP})


def api_message(request: Request) -> Response:
    console: Console = request.app.state.console
    found = console.queue.message(_int(request.path_params["key"], "key"))
    return JSONResponse(found.to_json() | {"history": errorqueue.history(found, console.actions.about(found.id))})


@_acting
async def api_retry(request: Request, console: Console) -> Response:
    body = await _json_object(request)
    ids, what = await run_in_threadpool(_chosen_of_json, console, body)
    to_queue = body.get("to_queue")
    if to_queue is not None and (not isinstance(to_queue, str) or not to_queue.strip()):
        raise errors.UsageError("to_queue: give a queue address (a string), or leave it out to retry to each message's FailedQ")
    job = await run_in_threadpool(
        console.actions.retry, ids, _who(request), what, _rate(body.get("rate")), bool(body.get("wait")), to_queue and to_queue.strip()
    )
    return JSONResponse(job.to_json(), status_code=202 if job.state == "running" else 200)


def api_job(request: Request) -> Response:
    console: Console = request.app.state.console
    return JSONResponse(console.actions.job(_int(request.path_params["job"], "job")).to_json())


def api_cancel(request: Request) -> Response:
    job = _cancel(request)
    return job if isinstance(job, Response) else JSONResponse(job.to_json())


def api_log(request: Request) -> Response:
    console: Console = request.app.state.console
    return JSONResponse({"actions": console.actions.history()})


def api_csrf(request: Request) -> Response:
    console: Console = request.app.state.console
    operator = request.state.operator
    return JSONResponse({"csrf": request.state.csrf, "who": operator.name, "role": request.state.role, "read_only": console.read_only})


# ------------------------------------------------------------------------------------ errors
async def _usage(request: Request, exc: Exception) -> Response:
    response = _refusal(request, 400, str(exc))
    response.headers.update(SECURITY_HEADERS)
    return response


async def _refused(request: Request, exc: Exception) -> Response:
    response = _refusal(request, 409, str(exc))
    response.headers.update(SECURITY_HEADERS)
    return response


async def _not_found(request: Request, exc: Exception) -> Response:
    response = _refusal(request, 404, str(exc))
    response.headers.update(SECURITY_HEADERS)
    return response


# ------------------------------------------------------------------------- the archive
DEFAULT_WHY = "archived from the console"


def _archive(console: Console, ids: list[str], why: str, who: str, what: str, rate: float | None, wait: bool) -> Job:
    """Archive these messages of the error queue, as a job (checked before it starts)."""
    console.actions.require_log()
    chosen, move = console.queue.archive(Selection(ids=tuple(ids)), why or DEFAULT_WHY, who)
    return console.actions.start("archive", who, what, len(chosen), move, Pace(rate, wait), chosen)


def _restore(console: Console, keys: list[int], who: str, rate: float | None, wait: bool) -> Job:
    console.actions.require_log()
    if not keys:
        raise errors.UsageError("no archived message chosen: nothing to restore")
    ids, move, _ = console.queue.restore(keys=keys)
    chosen = len(dict.fromkeys(keys))
    return console.actions.start("restore", who, f"{chosen} archived message(s)", chosen, move, Pace(rate, wait), ids)


def _purge(console: Console, older_than: Any, who: str, rate: float | None, wait: bool) -> Job:
    milliseconds = duration_ms(str(older_than or ""))
    if milliseconds is None:
        raise errors.UsageError(f"older_than: {older_than!r} is not an age: give a number and its unit, e.g. 90m, 12h or 30d")
    console.actions.require_log()
    move = console.queue.purge(milliseconds / 1000)
    return console.actions.start("purge", who, f"archived more than {older_than} ago", None, move, Pace(rate, wait))


def _chosen(console: Console, fields: dict[str, str], ids: list[str]) -> tuple[list[str], str]:
    """The messages a form chose: the filter's matches (scope=filter) or the ids given."""
    if fields.pop("scope", None) == "filter":
        return _matching(console, {k: v for k, v in fields.items() if k in _FILTER_FIELDS and v})
    if not ids:
        raise errors.UsageError("no message chosen: pick one or more")
    return ids, f"{len(ids)} chosen message(s)"


def _chosen_of_json(console: Console, body: dict) -> tuple[list[str], str]:
    """The messages a request chose: its ids, or its filter's matches."""
    if ("ids" in body) == ("filter" in body):
        raise errors.UsageError("give exactly one of ids (a list of message ids) and filter (an object of filter fields)")
    if "ids" in body:
        if not isinstance(body["ids"], list) or not body["ids"] or not all(isinstance(i, str) for i in body["ids"]):
            raise errors.UsageError("ids: give a list of one or more message ids (strings)")
        return body["ids"], f"{len(body['ids'])} chosen message(s)"
    given = body["filter"]
    if not isinstance(given, dict) or not set(given) <= _FILTER_FIELDS:
        raise errors.UsageError(f"filter: give an object of {', '.join(sorted(_FILTER_FIELDS))}")
    return _matching(console, {k: str(v) for k, v in given.items() if v})


@_acting
async def _archive_action(request: Request, console: Console, work: Callable[[Console, Any, str], Job], json: bool) -> Response:
    """An archive action of a form (then the job's page) or of the API (then the job as JSON): the
    operator's only; `work` (the console, the form or JSON body, who) starts the job, in the thread pool."""
    given = await _json_object(request) if json else await request.form()
    job = await run_in_threadpool(work, console, given, _who(request))
    if json:
        return JSONResponse(job.to_json(), status_code=202 if job.state == "running" else 200)
    return RedirectResponse(f"/jobs/{job.id}", status_code=303)


def _archive_of_form(console: Console, form: Any, who: str) -> Job:
    fields = {k: str(v) for k, v in form.items()}
    ids, what = _chosen(console, fields, [str(v) for v in form.getlist("id")])
    return _archive(console, ids, fields.get("why", ""), who, what, _rate(form.get("rate")), False)


async def archive_form(request: Request) -> Response:
    return await _archive_action(request, _archive_of_form, json=False)


def _restore_of_form(console: Console, form: Any, who: str) -> Job:
    return _restore(console, [_int(v, "key") for v in form.getlist("key")], who, _rate(form.get("rate")), False)


async def restore_form(request: Request) -> Response:
    return await _archive_action(request, _restore_of_form, json=False)


async def purge_form(request: Request) -> Response:
    return await _archive_action(
        request, lambda console, form, who: _purge(console, form.get("older_than"), who, _rate(form.get("rate")), False), json=False
    )


def archive_page(request: Request) -> Response:
    console: Console = request.app.state.console
    after = _int(request.query_params.get("after"), "after")
    declared = console.queue.archived.table is not None
    rows, next_after = console.queue.archived_page(after) if declared else ([], None)
    total = console.queue.archived_count() if declared else 0
    return _page(request, "archive.html", declared=declared, rows=rows, after=after, next_after=next_after, total=total)


def api_archived(request: Request) -> Response:
    console: Console = request.app.state.console
    after = _int(request.query_params.get("after"), "after")
    limit = _int(request.query_params.get("limit"), "limit")
    rows, next_after = console.queue.archived_page(after, 50 if limit is None else limit)
    return JSONResponse({"messages": [r.to_json() for r in rows], "after": after, "next_after": next_after})


async def _json_object(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise errors.UsageError("give a JSON object (docs/console.md, the JSON API)")
    return body


def _archive_of_json(console: Console, body: dict, who: str) -> Job:
    ids, what = _chosen_of_json(console, body)
    why = body.get("why") or ""
    if not isinstance(why, str):
        raise errors.UsageError("why: give a text")
    return _archive(console, ids, why, who, what, _rate(body.get("rate")), bool(body.get("wait")))


def _restore_of_json(console: Console, body: dict, who: str) -> Job:
    keys = body.get("keys")
    if not isinstance(keys, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in keys):
        raise errors.UsageError("keys: give a list of archive keys (whole numbers, GET /api/archive lists them)")
    return _restore(console, keys, who, _rate(body.get("rate")), bool(body.get("wait")))


def _purge_of_json(console: Console, body: dict, who: str) -> Job:
    return _purge(console, body.get("older_than"), who, _rate(body.get("rate")), bool(body.get("wait")))


async def api_archive(request: Request) -> Response:
    return await _archive_action(request, _archive_of_json, json=True)


async def api_restore(request: Request) -> Response:
    return await _archive_action(request, _restore_of_json, json=True)


async def api_purge(request: Request) -> Response:
    return await _archive_action(request, _purge_of_json, json=True)


ARCHIVE_ROUTES = [
    Route("/archive", archive_page),
    Route("/actions/archive", archive_form, methods=["POST"]),
    Route("/actions/restore", restore_form, methods=["POST"]),
    Route("/actions/purge", purge_form, methods=["POST"]),
    Route("/api/archive", api_archived),
    Route("/api/archive", api_archive, methods=["POST"]),
    Route("/api/restore", api_restore, methods=["POST"]),
    Route("/api/purge", api_purge, methods=["POST"]),
]


def make_app(console: Console) -> Starlette:
    routes = [
        Route("/", overview),
        Route("/graph.svg", graph),
        Route("/failed", groups_page),
        Route("/failed/messages", messages_page),
        Route("/failed/messages/{key}", message_page),
        Route("/actions/retry", retry_form, methods=["POST"]),
        Route("/actions/edit", edit_form, methods=["POST"]),
        Route("/api/edit", api_edit, methods=["POST"]),
        Route("/jobs/{job}", job_page),
        Route("/jobs/{job}/cancel", cancel_form, methods=["POST"]),
        Route("/log", log_page),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/api/overview", api_overview),
        Route("/api/failed/groups", api_groups),
        Route("/api/failed/messages", api_messages),
        Route("/api/failed/messages/{key}", api_message),
        Route("/api/retry", api_retry, methods=["POST"]),
        Route("/api/jobs/{job}", api_job),
        Route("/api/jobs/{job}/cancel", api_cancel, methods=["POST"]),
        Route("/api/log", api_log),
        Route("/api/csrf", api_csrf),
        *ARCHIVE_ROUTES,
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(AccessMiddleware)],
        exception_handlers={errors.UsageError: _usage, errors.NotFound: _not_found, errors.Refused: _refused},
    )
    app.state.console = console
    return app
