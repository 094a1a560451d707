#!/usr/bin/env bash
# Set up runner in .venv and drain the demo plan with three workers racing on a
# bare git remote. Everything happens in a temporary folder; the repository is untouched.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" runner-demo

echo "== a project with a bare remote in $WORK"
git init --quiet -b main "$WORK/project"
echo "# calc project" > "$WORK/project/README.md"
git -C "$WORK/project" add README.md
git -C "$WORK/project" commit --quiet -m "initial"
git clone --quiet --bare "$WORK/project" "$WORK/remote.git"
for host in host-a host-b host-c; do git clone --quiet "$WORK/remote.git" "$WORK/$host"; done

echo "== runner init and import the demo plan"
"$RUNNER" init --repo "$WORK/host-a"
"$RUNNER" import "$ROOT/examples/demo-plan" --repo "$WORK/host-a"
"$RUNNER" validate --repo "$WORK/host-a"
"$RUNNER" status --repo "$WORK/host-a"

echo "== three workers drain it (runner worker --once)"
pids=()
for host in host-a host-b host-c; do
    "$RUNNER" worker --id "$host" --once --interval 0.3 --repo "$WORK/$host" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

echo "== the result"
"$RUNNER" status --repo "$WORK/host-a"
"$RUNNER" log --repo "$WORK/host-a" --limit 12
git -C "$WORK/remote.git" log --oneline --graph runner/integration
git -C "$WORK/remote.git" ls-tree -r --name-only runner/integration
echo
echo "demo repository kept in $WORK (git -C $WORK/remote.git log runner/queue is the audit trail)"
"$RUNNER" status --repo "$WORK/host-a" --json | python3 -c "import json,sys; s=json.load(sys.stdin)['steps']; bad=[x['step'] for x in s if x['status']!='done']; sys.exit('not done: %s' % bad if bad else 0)"
