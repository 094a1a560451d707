"""procrastinate's side of the drain comparison; runs on the peers' venv (harness.py).

    python procrastinate_drain.py prepare --dsn DSN --jobs N   # fresh schema, N no-op jobs deferred
    python procrastinate_drain.py work --dsn DSN               # one worker, concurrency 1, exits when
                                                               # the queue is empty; prints jobs done
The bench times `work` as a fresh process, as it times `runner worker --once`.
"""

from __future__ import annotations

import argparse
import logging

import procrastinate
import psycopg


def noop() -> None:
    """Does nothing, like the runner steps' `true`."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("prepare", "work"))
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--jobs", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # not its advice on where an App lives
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=args.dsn))
    task = app.task(name="noop")(noop)
    if args.mode == "prepare":
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
        with app.open():
            app.schema_manager.apply_schema()
            task.batch_defer(*[{} for _ in range(args.jobs)])
        return
    app.run_worker(concurrency=1, wait=False, install_signal_handlers=False)
    with psycopg.connect(args.dsn) as conn:
        done = conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'").fetchone()[0]
    print(done)


if __name__ == "__main__":
    main()
