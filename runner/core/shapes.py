"""Token shapes: what a credential looks like (a GitHub token, an AWS key id, a private key
block), found in any text. The shapes are detect-secrets' (Yelp), read from its regex
detectors, so they grow with that library; a few it lacks are added in OWN below.

Importing detect-secrets costs ~100-140 ms (it pulls in requests), too much for the server
hook's every push or a one-shot command, so its patterns are read from it once per installed
version and kept in a small JSON file beside runner's saved help ($XDG_CACHE_HOME/runner/);
each pattern also carries a literal its every match must hold ("ghp_"-like), found from the
pattern itself, so a text that holds none of them costs one substring search, not a regex.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Shapes detect-secrets lacks (1.5.0), each from the vendor's documented format.
OWN: tuple[tuple[str, str, int], ...] = (
    ("GitHub Token", r"github_pat_[A-Za-z0-9_]{22,}", 0),  # fine-grained personal access tokens
    ("Anthropic Key", r"sk-ant-[a-z]+[0-9]*-[A-Za-z0-9_\-]{20,}", 0),  # sk-ant-api03-..., sk-ant-admin01-...
    ("OpenAI Token", r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}", 0),  # project, service and admin keys
    ("Google API Key", r"AIza[0-9A-Za-z_\-]{35}", 0),
    ("Stripe Access Key", r"(?:r|s)k_test_[0-9a-zA-Z]{24,}", 0),  # detect-secrets has the live ones
    ("Private Key", r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----", 0),
)
# detect-secrets' detectors left out: the entropy ones (every git object id would be redacted),
# the keyword ones (`password = ...` in any code), a public IP (not a credential), the
# IBM/Cloudant/SoftLayer detectors keyed by a variable's name (as noisy, and each 10+ ms on
# 256 KiB of text where the rest together take less), and Telegram's and Discord's bot tokens,
# whose patterns hold no literal to find them by: each costs more than all the others together
# on a heartbeat's 16 KiB of test output.
SKIPPED = (
    "Base64 High Entropy String",
    "Hex High Entropy String",
    "Secret Keyword",
    "Public IP (ipv4)",
    "IBM Cloud IAM Key",
    "IBM COS HMAC Credentials",
    "Cloudant Credentials",
    "SoftLayer Credentials",
    "Telegram Bot Token",
    "Discord Bot Token",
)
FORMAT = 1  # bump when what the cache holds changes
TOKEN_CHARS = "A-Za-z0-9_\\-"
_PRIVATE_END = re.compile(
    r"-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----|^Private-MAC: *[0-9a-fA-F]*$", re.MULTILINE
)


@dataclass(frozen=True)
class Shape:
    name: str  # what the redaction says: "GitHub Token"
    source: str  # the regular expression, compiled the first time a text holds one of its literals
    flags: int
    literals: tuple[str, ...]  # a match holds one of these (lowercase when the pattern ignores case); () = unknown
    folded: bool = False  # the pattern ignores case

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """Compiled on first use: the hook scans a claim's few lines, and compiling every
        detector's expression cost it more than the rest of its check."""
        return re.compile(self.source, self.flags)

    def spans(self, text: str, lowered: str | None = None) -> list[tuple[int, int]]:
        """Where this shape is in `text`: the secret (a pattern's groups when it has them),
        widened to the whole token it sits in; a private key to its block's end."""
        if self.literals:
            haystack = (lowered if lowered is not None else text.lower()) if self.folded else text
            for literal in self.literals:
                if literal in haystack:
                    break
            else:
                return []
        found = []
        for match in self.pattern.finditer(text):
            if self.name == "JSON Web Token" and not _formally_a_jwt(match.group()):
                continue
            groups = [i for i in range(1, (self.pattern.groups or 0) + 1) if match.group(i)]
            for start, end in [match.span(i) for i in groups[:1]] or [match.span()]:
                if self.name == "Private Key":
                    found.append(_private_key_block(text, start))
                else:
                    found.append(_widened(text, start, end))
        return found


_TOKEN = re.compile(f"[{TOKEN_CHARS}]")


def _widened(text: str, start: int, end: int) -> tuple[int, int]:
    """A match grown to the run of token characters around it, so no tail of a longer token
    than the pattern names stays readable."""
    while start > 0 and _TOKEN.match(text, start - 1):
        start -= 1
    while end < len(text) and _TOKEN.match(text, end):
        end += 1
    return start, end


def _private_key_block(text: str, at: int) -> tuple[int, int]:
    line = text.rfind("\n", 0, at) + 1
    dashes = text.rfind("-----", line, at)
    end = _PRIVATE_END.search(text, at)
    return dashes if dashes >= 0 else at, end.end() if end else len(text)


def _formally_a_jwt(token: str) -> bool:
    """detect-secrets' check (JwtTokenDetector.is_formally_valid): each part is base64 and the
    first two are JSON."""
    import base64

    for index, part in enumerate(token.split(".")):
        try:
            data = part.encode("ascii")
            if len(data) % 4 == 1:
                return False
            decoded = base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4))
            if index < 2:
                json.loads(decoded.decode("utf-8"))
        except (ValueError, UnicodeError):
            return False
    return True


# --- the library's patterns, read once per installed version ------------------------------

_loaded: tuple[Shape, ...] | None = None


def shapes(cache_dir: Path | None = None) -> tuple[Shape, ...]:
    """Every shape: detect-secrets' (from the cache, or read from the library and cached) and OWN."""
    global _loaded
    if _loaded is None:
        patterns = _cached_library_patterns(cache_dir or _cache_dir()) + [list(row) for row in OWN]
        _loaded = tuple(
            Shape(name, pattern, flags, tuple(literals), bool(flags & re.IGNORECASE))
            for name, pattern, flags, *rest in patterns
            for literals in [rest[0] if rest else required_literals(pattern, flags)]
        )
    return _loaded


def _cache_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "runner"


def library_key() -> str:
    """What the cached patterns were read from: the installed detect-secrets' detector files
    (names, sizes, times) and this module's own text."""
    import hashlib
    from importlib.util import find_spec

    spec = find_spec("detect_secrets")
    if spec is None or not spec.origin:
        raise ImportError(
            "detect-secrets is not installed (pip install detect-secrets): runner finds token shapes with it"
        )
    digest = hashlib.sha1(f"{FORMAT}\0{spec.origin}".encode())
    with os.scandir(Path(spec.origin).parent / "plugins") as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            stat = entry.stat()
            digest.update(f"{entry.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()


def _cached_library_patterns(cache_dir: Path) -> list[list]:
    key = library_key()
    path = cache_dir / f"shapes-{key[:16]}.json"  # one a version: runners of two versions on a host do not take turns
    try:
        data = json.loads(path.read_text())
        if data.get("key") == key:
            return data["patterns"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    patterns = [
        [name, pattern, flags, list(required_literals(pattern, flags))] for name, pattern, flags in library_patterns()
    ]
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"shapes.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "patterns": patterns}))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: read from the library in every process
    return patterns


def library_patterns() -> list[tuple[str, str, int]]:
    """(name, pattern, flags) of every regex detector of detect-secrets but SKIPPED."""
    import importlib
    import pkgutil

    from detect_secrets import plugins
    from detect_secrets.plugins.base import RegexBasedDetector

    found: list[tuple[str, str, int]] = []
    for module_info in sorted(pkgutil.iter_modules(plugins.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"detect_secrets.plugins.{module_info.name}")
        for value in sorted(vars(module).values(), key=lambda v: getattr(v, "__name__", "")):
            if (
                isinstance(value, type)
                and issubclass(value, RegexBasedDetector)
                and value.__module__ == module.__name__
                and not getattr(value, "__abstractmethods__", None)
                and value.secret_type not in SKIPPED
            ):
                found += [
                    (str(value.secret_type), str(regex.pattern), int(regex.flags) & ~re.UNICODE)
                    for regex in value().denylist
                ]
    return found


def required_literals(pattern: str, flags: int = 0) -> tuple[str, ...]:
    """Literals one of which every match of `pattern` holds (lowercase under re.I), the longest
    such choice found; () when none can be told (the pattern then always runs)."""
    try:
        import re._constants as sre  # type: ignore[import-not-found]
        import re._parser as parser  # type: ignore[import-not-found]

        found = _literals(list(parser.parse(pattern, flags)), sre)
    except Exception:  # noqa: BLE001 - a private module of Python's: without it, no shortcut
        return ()
    if not found:
        return ()
    return tuple(sorted({f.lower() for f in found} if flags & re.IGNORECASE else set(found)))


def _literals(items: list, sre: Any) -> list[str] | None:
    best: list[str] | None = None
    run = ""

    def consider(choice: list[str] | None) -> None:
        nonlocal best
        if choice and all(choice) and (best is None or min(map(len, choice)) > min(map(len, best))):
            best = choice

    for op, arg in items:
        if op is sre.LITERAL:
            run += chr(arg)
            continue
        consider([run] if run else None)
        run = ""
        if op is sre.SUBPATTERN:
            consider(_literals(list(arg[3]), sre))
        elif op is sre.BRANCH:
            options = [_literals(list(branch), sre) for branch in arg[1]]
            if all(options):
                consider([literal for option in options for literal in option or ()])
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and arg[0] >= 1:
            consider(_literals(list(arg[2]), sre))
    consider([run] if run else None)
    return best
