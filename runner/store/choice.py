"""The one place runner chooses the store of a repository: callers ask for a Store and never
name an implementation (runner.store.memory's is for tests, which build it themselves)."""

from __future__ import annotations

from pathlib import Path

from runner.store import Store


def open_store(
    path: str | Path = ".", remote: str | None = "auto", receiving: bool = False, one_shot: bool = False
) -> Store:
    """The store of the repository at `path`. `remote`: "auto" (origin when there is one), a
    remote's name, or None (this repository alone). `receiving`: the server's repository
    during pre-receive, with the pushed objects that wait in git's quarantine (read through
    git's own commands: the hook is a short process too). `one_shot`: for
    a command that reads a little and exits, where starting a few git commands costs less
    than importing pygit2 (runner.store.plumbing)."""
    if receiving:
        from runner.store.plumbing import receiving as receiving_store

        return receiving_store(path)
    if one_shot:
        from runner.store.plumbing import PlumbingStore

        return PlumbingStore(path, remote=remote)
    from runner.store.git import GitStore  # pygit2, only once a store is opened

    return GitStore(path, remote=remote)
