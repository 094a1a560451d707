"""Refs read from the files git keeps them in: a loose file under the git dir, else a line of
packed-refs (parsed again only when it changes). The one reader of ref files, for both git
stores: the plumbing store reads a ref's value here with no git process (a `runner status`
answered from its plan index starts none), and GitStore lists the names under a prefix
(libgit2 can only list every ref, and step branches pile up, one a step). What the files
cannot say for sure (a reftable repository, a symbolic ref) is UNSURE: the caller asks git."""

from __future__ import annotations

import os
import re
from pathlib import Path

UNSURE = "unsure"  # not an object id: ask git's own commands
_OID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


class RefFiles:
    def __init__(self, git_dir: Path):
        self.git_dir = git_dir
        self.readable = not (git_dir / "reftable").exists()  # a reftable repository keeps no ref files
        self._packed: tuple[tuple | None, dict[str, str]] = (None, {})  # (stat of packed-refs, name -> id)

    def value(self, ref: str) -> str | None:
        """The id `ref` holds, None when it does not exist, UNSURE when the files cannot say."""
        if not self.readable or not ref.startswith("refs/") or ".." in ref or "\\" in ref:
            return UNSURE
        try:
            text = (self.git_dir / ref).read_text(encoding="ascii").strip()
            return text if _OID.fullmatch(text) else UNSURE  # a symbolic ref ("ref: ..."), or damage
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            pass  # not loose (deleted loose refs are gone from packed-refs first)
        except (OSError, UnicodeDecodeError):
            return UNSURE
        return self._packed_refs().get(ref)

    def under(self, prefix: str) -> set[str]:
        """The names of the refs under `prefix` (loose and packed)."""
        names: set[str] = set()
        for folder, _, files in os.walk(self.git_dir / prefix):
            base = Path(folder).relative_to(self.git_dir).as_posix() + "/"
            names.update(base + name for name in files if not name.endswith(".lock"))
        names.update(name for name in self._packed_refs() if name.startswith(prefix))
        return names

    def _packed_refs(self) -> dict[str, str]:
        path = self.git_dir / "packed-refs"
        try:
            stamp = path.stat()
        except OSError:
            return {}
        key = (stamp.st_ino, stamp.st_size, stamp.st_mtime_ns)
        if self._packed[0] != key:
            lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
            found = (line.split(" ", 1) for line in lines if line[:1] not in ("#", "^") and " " in line)
            self._packed = (key, {name: oid for oid, name in found})
        return self._packed[1]
