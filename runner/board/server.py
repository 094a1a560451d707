"""The board's web server: starlette routes served by uvicorn on one socket (127.0.0.1 by
default). Every read of the queue and every action runs on one thread of its own (pygit2
objects are not shared across threads), in turn; a poller fetches the queue every few
seconds and tells open pages by server-sent events when it moved, and they read it again.

Acting needs the token made at start (sent in a header, which no cross-site form can set),
a JSON body and, when the browser sends one, an Origin that is this board. A request whose
Host is not one of this board's names (DNS rebinding) is refused, whatever address it listens
on; so is a read of /api/ that the browser says another site's page made (Sec-Fetch-Site). A
step's page fetches its branches at most once per poll, however many requests ask for it, and
only for a step the queue has. `--read-only` serves no action at all."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import secrets
import socket
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from runner.board import acts, diffs, view
from runner.core.errors import BadInput, RunnerError
from runner.core.ids import step_id_problem
from runner.queue import metrics
from runner.queue.queue import Queue
from runner.queue.snapshot import Snapshot

STATIC = Path(__file__).parent / "static"
TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
# every asset ships inside the package: the files of static/, and nothing else
ASSETS = {path.name: TYPES[path.suffix] for path in sorted(STATIC.iterdir()) if path.suffix in TYPES}
LOOPBACK = ("127.0.0.1", "localhost", "::1")
HEADERS = {
    # Nothing but the board's own files: no inline script, no other origin, no framing.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Board:
    def __init__(self, make_queue: Callable[[], Queue], actor: str | None, read_only: bool, every: float):
        self.make_queue = make_queue
        self.actor = actor
        self.read_only = read_only
        self.every = every
        self.token = secrets.token_urlsafe(24)
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="board-queue")
        self.queue: Queue | None = None
        self.snap: Snapshot | None = None
        self.version = ""
        self.cached: tuple[str, dict[str, Any]] | None = None
        self.moved = asyncio.Event()  # set, then replaced, each time the queue moved (bound to the loop on first use)
        self.hosts: set[str] = set()  # the Host headers a request may carry: this board's names
        self.fetched: set[str] = set()  # branches fetched since the last read: one fetch serves every request
        self.pages: dict[str, dict[str, Any]] = {}  # step pages made since the last read

    # --- on the queue's thread ------------------------------------------------------------

    def read(self) -> str:
        """Fetch the queue (and heartbeats) as a worker does; the version of what was read."""
        queue = self._queue()
        snap = queue.snapshot()
        beats = sorted(queue.store.heartbeats().items())
        self.snap, self.fetched, self.pages = snap, set(), {}
        return hashlib.sha1(json.dumps([snap.tip, beats]).encode()).hexdigest()[:16]

    def home(self) -> dict[str, Any]:
        if self.cached is None or self.cached[0] != self.version:
            queue, snap = self._queue(), self._snap()
            self.cached = (self.version, view.home(queue, snap, view.halted_since(queue, snap)))
        return self.cached[1]

    def step(self, step_id: str) -> dict[str, Any]:
        """A step's page, made once per poll: a page of another site that asks for it in a loop
        costs one fetch a poll, and a name the queue has no step of costs none."""
        queue, last = self._queue(), self._snap()
        if step_id in self.pages:
            return self.pages[step_id]
        if problem := self._not_a_step(step_id):
            raise BadInput(problem)
        branches = queue.branches(step_id)
        if wanted := [branch for branch in branches if branch not in self.fetched]:
            queue.store.fetch(wanted)  # the step's result and the integration tip, for its diff
            self.fetched.update(wanted)
        page = self.pages[step_id] = view.step_page(queue, queue.snapshot_at(last.tip, branches), step_id)
        return page

    def file(self, step_id: str, path: str) -> dict[str, Any]:
        """A whole file of the step's result (context beyond the diff's hunks, on demand)."""
        page = self.step(step_id)
        return diffs.whole_file(self._queue().store, page["diff"].get("commit"), path)

    def act(
        self, action: str, step: str | None, reason: str | None, comments: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        if self.actor is None:  # refused before it gets here: a read-only board acts as nobody
            return {"ok": False, "error": "error: this board is read-only"}
        if step and (problem := self._not_a_step(step)):
            return {"ok": False, "missing": True, "error": f"error: {problem}"}
        return acts.act(self._queue(), self.actor, action, step, reason, comments)

    def metrics(self) -> str:
        """The queue as the last poll read it, in Prometheus' text format (runner.queue.metrics)."""
        return metrics.render(metrics.queue_families(self._snap()))

    def _not_a_step(self, step_id: str) -> str | None:
        """Why `step_id` names no step of the queue (read before any git call is made with it)."""
        if problem := step_id_problem(step_id):
            return problem
        return None if self._snap().plan.find(step_id) is not None else f"no step {step_id!r} (see `runner status`)"

    def _queue(self) -> Queue:
        if self.queue is None:
            self.queue = self.make_queue()
        return self.queue

    def _snap(self) -> Snapshot:
        """The snapshot last read (read now when none was yet)."""
        if self.snap is None:
            self.read()
        return cast(Snapshot, self.snap)  # read() set it

    # --- on the event loop ----------------------------------------------------------------

    async def run(self, func: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.thread, func, *args)

    async def refresh(self) -> None:
        try:
            version = await self.run(self.read)
        except RunnerError as exc:  # the remote away for a moment: the page keeps what it has
            print(f"runner board: could not read the queue: {exc}", file=sys.stderr)
            return
        if version != self.version:
            self.version = version
            moved, self.moved = self.moved, asyncio.Event()
            moved.set()

    async def poll(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self.refresh()

    def meta(self) -> dict[str, Any]:
        tip = self.snap.tip if self.snap is not None else None
        return {
            "version": self.version,
            "actor": self.actor,
            "read_only": self.read_only,
            "every": self.every,
            "queue": self.queue.branch if self.queue else None,
            "tip": tip,
            "remote": self.queue.store.remote if self.queue else None,
        }


def app(board: Board) -> Starlette:
    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "board.html", headers=HEADERS)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return Response("not found", 404, headers=HEADERS)
        return FileResponse(STATIC / name, media_type=ASSETS[name], headers=HEADERS)

    async def state(request: Request) -> Response:
        return JSONResponse({**await board.run(board.home), **board.meta()}, headers=HEADERS)

    async def prometheus(request: Request) -> Response:
        return Response(await board.run(board.metrics), headers={**HEADERS, "content-type": metrics.CONTENT_TYPE})

    async def step(request: Request) -> Response:
        try:
            data = await board.run(board.step, request.path_params["step"])
        except BadInput as exc:
            return JSONResponse({"error": f"error: {exc.problems[0]}"}, 404, headers=HEADERS)
        return JSONResponse({**data, **board.meta()}, headers=HEADERS)

    async def file(request: Request) -> Response:
        try:
            data = await board.run(board.file, request.path_params["step"], request.query_params.get("path", ""))
        except BadInput as exc:
            return JSONResponse({"error": f"error: {exc.problems[0]}"}, 404, headers=HEADERS)
        return JSONResponse(data, headers=HEADERS)

    async def events(request: Request) -> Response:
        async def stream():
            sent = None
            while True:
                if board.version != sent:
                    sent = board.version
                    yield f"event: moved\ndata: {json.dumps({'version': sent})}\n\n"
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(board.moved.wait(), 15)
                    continue
                yield ": still here\n\n"  # keeps proxies from closing a quiet stream

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={**HEADERS, "X-Accel-Buffering": "no"}
        )

    async def act(request: Request) -> Response:
        if why := refused(board, request):
            return JSONResponse({"ok": False, "error": f"error: {why}"}, 403, headers=HEADERS)
        try:
            body = await request.json()
        except ValueError:
            body = None
        if (
            not isinstance(body, dict)
            or not all(isinstance(body.get(k, ""), (str, type(None))) for k in ("action", "step", "reason"))
            or not isinstance(body.get("comments") or [], list)
        ):
            return JSONResponse(
                {"ok": False, "error": 'error: send JSON: {"action", "step", "reason", "comments"}'},
                400,
                headers=HEADERS,
            )
        done = await board.run(
            board.act,
            str(body.get("action") or ""),
            body.get("step"),
            body.get("reason"),
            _comments(body.get("comments")),
        )
        if done.pop("missing", False):
            return JSONResponse(done, 404, headers=HEADERS)
        await board.refresh()
        return JSONResponse(done, 200 if done["ok"] else 409, headers=HEADERS)

    @contextlib.asynccontextmanager
    async def lifespan(_):
        task = asyncio.create_task(board.poll())
        try:
            yield
        finally:
            task.cancel()

    routes = [
        Route("/", page),
        Route("/steps/{step:path}", page),
        Route("/static/{name}", asset),
        Route("/metrics", prometheus),
        Route("/api/state", state),
        Route("/api/file/{step:path}", file),
        Route("/api/steps/{step:path}", step),
        Route("/api/events", events),
    ]
    if not board.read_only:
        routes.append(Route("/api/act", act, methods=["POST"]))
    return _guard(Starlette(routes=routes, lifespan=lifespan), board)


def _comments(given: Any) -> list[dict[str, Any]] | None:
    """A request's comments on lines, as `runner reject --comment` gives them (checked by the queue's review)."""
    if not given:
        return None
    return [
        {"file": c.get("file"), "line": c.get("line"), "end": c.get("end") or c.get("line"), "text": c.get("text")}
        if isinstance(c, dict)
        else {}
        for c in given
    ]


def refused(board: Board, request: Request) -> str | None:
    """Why a request may not act (None when it may)."""
    if not secrets.compare_digest(request.headers.get("x-runner-token", ""), board.token):
        return (
            "this request does not carry the board's token (open the address `runner board` printed); nothing was "
            "changed"
        )
    origin = request.headers.get("origin")
    if origin is not None and origin != f"http://{request.headers.get('host', '')}":
        return f"a request from {origin} may not act on this board; nothing was changed"
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return "actions are JSON requests; nothing was changed"
    return None


def _guard(application, board: Board):
    """Only requests addressed to this board by one of its names (a page of another site that
    resolves its own name to this board's address cannot read or act), and no read of the
    queue that a browser says another site's page made (an <img> of /api/steps/... on any page)."""

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            host = headers.get(b"host", b"").decode("latin-1")
            if host not in board.hosts:
                await Response(f"misdirected request: {host!r} is not this board", 421)(scope, receive, send)
                return
            site = headers.get(b"sec-fetch-site", b"").decode("latin-1")
            if scope["path"].startswith("/api/") and site not in ("", "same-origin", "none"):
                await Response(f"a {site} request may not read this board", 403)(scope, receive, send)
                return
        await application(scope, receive, send)

    return guarded


def allowed_hosts(host: str, port: int, also: tuple[str, ...] = ()) -> set[str]:
    """The Host headers this board answers: the address it listens on; on loopback the loopback
    names; on another address this machine's names (and, on every address, its addresses);
    and the names `also` gives (--allow-host, for a name a proxy or a tunnel uses; NAME:PORT
    for a tunnel's own port)."""
    given = {name for name in also if re.fullmatch(r"(\[[^\]]+\]|[^:\[\]]+):\d+", name)}  # NAME:PORT as it is
    names = {host, *(set(also) - given)}
    if _loopback(host):
        names |= set(LOOPBACK)
    else:
        names |= {socket.gethostname(), socket.getfqdn()}
        if host in ("0.0.0.0", "::", ""):
            import psutil

            names |= {
                a.address
                for nics in psutil.net_if_addrs().values()
                for a in nics
                if a.family in (socket.AF_INET, socket.AF_INET6) and "%" not in a.address
            }
    shown = {f"[{name}]" if ":" in name else name for name in names if name}
    return {f"{name}:{port}" for name in shown} | ({*shown} if port == 80 else set()) | given


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    make_queue: Callable[[], Queue],
    host: str,
    port: int,
    read_only: bool,
    actor: str | None,
    every: float,
    also: tuple[str, ...] = (),
) -> None:
    import uvicorn

    board = Board(make_queue, actor, read_only, every)
    board.version = board.thread.submit(board.read).result()  # no queue, no clone: one line and exit, before serving
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        raise BadInput(
            f"--host {host} --port {port}: cannot listen there ({exc.strerror}); pick another --port (0: any free one)"
        ) from None
    sock.listen(128)  # before the address is printed: a browser opening it at once queues until uvicorn accepts
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    board.hosts = allowed_hosts(host, port, also)
    if not _loopback(host):
        print(
            f"warning: --host {host} lets other machines reach the board: anyone who can reach it reads the queue. "
            f"Prefer the default 127.0.0.1 and, from your laptop, an ssh tunnel: ssh -N -L {port}:127.0.0.1:{port} "
            "THIS-HOST, "
            f"then open http://127.0.0.1:{port}/",
            file=sys.stderr,
            flush=True,
        )
    address = f"http://{shown}:{port}/"
    if read_only:
        print(f"runner board (read-only) on {address}", flush=True)
    else:
        print(f"runner board on {address}#token={board.token}", flush=True)
        print(
            f"acting as {actor}; open the address with its token to approve, reject, retry, abort, halt and resume",
            flush=True,
        )
    print("Ctrl-C stops it", flush=True)
    config = uvicorn.Config(
        app(board), log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=1
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        board.thread.shutdown(wait=False, cancel_futures=True)
