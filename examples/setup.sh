# Sourced by the demos: runner in $ROOT/.venv (made once), git identity for the demo's commits,
# and a temporary folder $WORK named after the demo ($1).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

if [ ! -x "$VENV/bin/runner" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet -e "$ROOT[test]"
fi
RUNNER="$VENV/bin/runner"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
export GIT_AUTHOR_NAME="${GIT_AUTHOR_NAME:-runner demo}" GIT_AUTHOR_EMAIL="${GIT_AUTHOR_EMAIL:-demo@example.com}"
export GIT_COMMITTER_NAME="$GIT_AUTHOR_NAME" GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL"
