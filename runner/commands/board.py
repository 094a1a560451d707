"""The review surface: `runner board` (a local web app on this clone) and `runner logs`
(a running step's output, from any clone). The board's web libraries are imported only
when it starts; `logs` needs none of them."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from runner.commands.common import By, Target, person

StepArg = Annotated[str, typer.Argument(help="The step.")]


def board(
    target: Target,
    port: Annotated[int, typer.Option("--port", help="The port to listen on (0: any free one).")] = 8765,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="The address to listen on. Other than loopback, anyone who reaches it reads the queue: prefer an ssh "
            "tunnel.",
        ),
    ] = "127.0.0.1",
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            help="Show, never act (for a shared screen): no approve, reject, retry, abort, halt or resume.",
        ),
    ] = False,
    every: Annotated[
        float, typer.Option("--every", help="Seconds between fetches of the queue; open pages update when it moved.")
    ] = 2.0,
    allow_host: Annotated[
        list[str],
        typer.Option(
            "--allow-host",
            help="Another name a browser reaches the board by (a proxy's, a tunnel's), repeatable: any other Host "
            "is refused (DNS rebinding).",
            metavar="NAME",
            show_default=False,
        ),
    ] = [],
    by: By = None,
) -> None:
    """Serve the queue as a web page on this clone.

    What needs you first, the plan and its graph,
    each step's result, runs and live log, the workers; approve, reject (with your feedback),
    retry, abort, halt and resume from it, as you (git's user.name, or --by).

    It prints its address with a token: only a request carrying that token can act. It
    listens on 127.0.0.1; from another machine use `ssh -N -L 8765:127.0.0.1:8765 HOST`."""
    from runner.board.server import serve

    actor = None if read_only else person(by, target.repo)
    serve(target.queue, host, port, read_only, actor, max(every, 0.1), tuple(allow_host))


def logs(
    target: Target,
    step_id: StepArg,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing what the step prints until it ends; a step not started yet is waited for.",
        ),
    ] = False,
    every: Annotated[float, typer.Option("--every", help="Seconds between fetches with --follow.")] = 2.0,
) -> None:
    """Print a step's output, from any clone.

    While it runs, the tail its worker's heartbeat carries
    (which run it is in, at most 16 KiB, as fresh as the last heartbeat: `[worker] live_log`);
    once it ended, the log tail its handoff keeps. With --follow, a step that has not started
    (ready, waiting, blocked) is waited for, then followed to its end. Control characters are
    shown escaped."""
    from runner.commands.render import print_json
    from runner.queue.livelog import step_output

    queue = target.queue()

    def look() -> dict:
        snap = queue.snapshot()
        return step_output(snap, step_id, lambda path: queue.store.file_at(snap.tip, path))

    now = look()
    if follow and now["status"] in NOT_STARTED:
        if target.json:
            print_json(now)
        else:
            _say(f"-- {step_id} is {now['status']}, not started: waiting for it to start (Ctrl-C stops)")
        before = now["attempt"]
        while now["status"] in NOT_STARTED and now["attempt"] == before:  # until a claim (or a person) moves it
            time.sleep(max(every, 0.1))
            now = look()
    if target.json:
        print_json(now)
    else:
        _say(_header(now))
        _write(now.get("output") or "")
    if follow and now["running"]:
        _follow(look, now, step_id, target.json, every)


NOT_STARTED = ("ready", "waiting", "blocked")  # what `runner logs --follow` waits on


def _follow(look, now: dict, step_id: str, json_out: bool, every: float) -> None:
    """Print what a running step prints until its attempt ends."""
    from runner.commands.render import print_json
    from runner.queue.livelog import new_output, rest_after

    shown = now.get("output") or ""
    while True:
        time.sleep(max(every, 0.1))
        nxt = look()
        if not nxt["running"] or nxt["attempt"] != now["attempt"]:
            if json_out:
                print_json(nxt)
                return
            if nxt["attempt"] == now["attempt"] and nxt.get("output"):
                # what it printed after its last heartbeat (all of it when no heartbeat carried any)
                _write(rest_after(shown, nxt["output"]) if shown else nxt["output"])
            _say(f"-- {step_id} attempt {now['attempt']} ended: {nxt['status']}")
            return
        if json_out:
            if nxt.get("output_bytes") != now.get("output_bytes") or nxt.get("run") != now.get("run"):
                print_json(nxt)
        else:
            if nxt.get("run") != now.get("run") and nxt.get("run"):
                _say(f"-- now running: {nxt['run']}")
            added = new_output(now, nxt)
            _write(added)
            shown = (shown + added)[-4096:]
        if nxt.get("output") is not None:
            now = nxt


def _header(now: dict) -> str:
    step, attempt = now["step"], now["attempt"]
    if now["running"]:
        if now["output"] is None:
            return f"-- {step} attempt {attempt} runs on {now['worker']}; its heartbeat has carried no output yet"
        return (
            f"-- {step} attempt {attempt} on {now['worker']}"
            + (f", running {now['run']}" if now.get("run") else "")
            + f" (heartbeat of {now['at']})"
        )
    if now["output"] is None:
        return f"-- {step} is {now['status']}, not running; no log tail recorded for it"
    return f"-- {step} is {now['status']}, not running; the log tail of attempt {attempt}, from its handoff:"


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")  # control characters are shown as escapes by runner's streams (commands/output.py)
    sys.stderr.flush()


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
