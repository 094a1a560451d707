"""What runner's caches are keyed by: the content of the code that made an answer, never a
hand-kept list of the files someone thought it depended on.

Three caches keep answers between processes: the parse cache (runner.queue.snapshot: a step
file's verdict, by its blob id), the plan index of `runner ready` / `status`
(runner.commands.quick: by the queue's tip) and the saved `runner --help`. Each is also
keyed by `package_hash()`, a hash of every Python file of the installed runner package, so a
change to any rule anywhere (yamlsafe's depth limit, the schema, a renderer) makes every one
of them read again; and by `library_hash()` of the libraries whose behaviour is part of the
answer (PyYAML for a verdict; click and typer for the help).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # the runner package


@functools.cache
def package_hash() -> str:
    """The hash of this runner's own source: every *.py of the package, by path and content."""
    return source_hash(PACKAGE)


@functools.cache
def package_stamp() -> str:
    """package_hash() for a process too short to read runner's source (the server's hook): the
    hash of every *.py file's path, size, modification time and inode, which an edit, a
    checkout or an install changes."""
    return hashlib.sha1("".join(sorted(_python_file_stats(str(PACKAGE)))).encode()).hexdigest()


def _python_file_stats(folder: str, prefix: str = "") -> Iterator[str]:
    """ "path\0size\0mtime\0inode\0" of each *.py below `folder` (the warm checker asks before
    every push it takes, so a third of os.walk's cost)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(".py") and entry.is_file():
                stat = entry.stat()
                yield f"{prefix}{entry.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ino}\0"
            elif entry.is_dir() and entry.name != "__pycache__":
                yield from _python_file_stats(entry.path, f"{prefix}{entry.name}/")


def source_hash(package: Path) -> str:
    digest = hashlib.sha1()
    for relative in sorted(_python_files(package)):
        data = (package / relative).read_bytes()
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _python_files(package: Path) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        base = os.path.relpath(folder, package)
        found += [
            os.path.normpath(os.path.join(base, name)).replace(os.sep, "/") for name in files if name.endswith(".py")
        ]
    return found


@functools.cache
def library_hash(*names: str) -> str:
    """The hash of the named libraries' files (a file's path relative to its package, e.g.
    "click/core.py"), found without importing them; a missing one counts as missing."""
    digest = hashlib.sha1()
    for name in names:
        package, _, rest = name.partition("/")
        spec = find_spec(package)
        path = Path(spec.origin).parent / rest if spec and spec.origin else None
        try:
            digest.update(name.encode() + b"\0" + (path.read_bytes() if path else b"missing"))
        except OSError:
            digest.update(name.encode() + b"\0unreadable")
    return digest.hexdigest()
