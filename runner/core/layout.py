"""Where things live: the files of the queue branch and runner's refs."""

from __future__ import annotations

TYPE_CHECKING = False  # collections.abc costs the server hook's start-up 2 ms, for an annotation
if TYPE_CHECKING:
    from collections.abc import Mapping

DEFAULT_QUEUE_BRANCH = "runner/queue"
DEFAULT_INTEGRATION_BRANCH = "runner/integration"
DEFAULT_STEP_BRANCH_PREFIX = "runner/steps/"

CONFIG_FILE = "runner.toml"
STEPS_DIR = "plans/steps"
HANDOFFS_DIR = "plans/handoffs"
PROMPTS_DIR = "plans/prompts"
ROOT_FILE = "plans/root.md"
NOTES_FILE = "plans/NOTES.md"
HALT_FILE = "plans/HALT"

HEARTBEAT_PREFIX = "refs/runner/heartbeats/"


def heartbeats_seen_from(remote: str) -> str:
    """Where a clone keeps its view of the remote `remote`'s heartbeat refs."""
    return f"refs/runner/remotes/{remote}/heartbeats/"


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

# Variables that point git at a repository other than the one in the current folder (git
# sets them for its hooks): runner's answers and a step's commands must not follow them.
GIT_REPOSITORY_ENV = frozenset(
    {
        "GIT_DIR",
        "GIT_COMMON_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
    }
)


def without_repository_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` less GIT_REPOSITORY_ENV: git run with it finds its repository from its folder."""
    return {name: value for name, value in environ.items() if name not in GIT_REPOSITORY_ENV}


# A large plan's steps go into 256 fan-out folders (named by a hash of the id), so every
# tree a claim rewrites stays small at any size; a small plan stays flat for people to
# browse. Plans written flat or in folders of their own are read as they are.
FANOUT_FROM = 256  # steps


def handoff_path(step_path: str) -> str:
    """Where a step's handoff goes: beside it under plans/handoffs, in the same folders (so a
    fanned-out plan's handoffs are fanned out too, and no tree a record rewrites grows large)."""
    return (
        HANDOFFS_DIR + step_path[len(STEPS_DIR) :]
        if step_path.startswith(STEPS_DIR + "/")
        else f"{HANDOFFS_DIR}/{step_id_of(step_path)}.md"
    )


def new_step_path(step_id: str, fanned: bool) -> str:
    """Where a new step file goes: flat, or in its fan-out folder."""
    if fanned:
        import hashlib

        return f"{STEPS_DIR}/{hashlib.sha1(step_id.encode()).hexdigest()[:2]}/{step_id}.md"
    return f"{STEPS_DIR}/{step_id}.md"


def is_step_path(path: str) -> bool:
    """A step file's name (a path below plans/steps, or a name within it)."""
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".md") and name.lower() != "readme.md"


def is_step_file(path: str) -> bool:
    return path.startswith(STEPS_DIR + "/") and is_step_path(path)


def step_id_of(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".md")


def branch_ref(branch: str) -> str:
    return "refs/heads/" + branch


def heartbeat_ref(worker: str) -> str:
    return HEARTBEAT_PREFIX + worker
