#!/usr/bin/env bash
# Drive examples/agent-plan (a 3-step plan for a word-count tool) through runner's whole
# pipeline with a stand-in agent (examples/agent-plan/fake-agent) in every role: orient,
# implement, gates, verify, review, sweep, orchestrate, and one person's `runner approve`.
# Two workers race on a bare git remote; everything happens in a temporary folder.
# With a real agent, the same run is: runner init --agent claude; runner import ...; runner worker.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" runner-agent-demo
AGENT="$ROOT/examples/agent-plan/fake-agent"

echo "== a project with a bare remote in $WORK"
git init --quiet -b main "$WORK/project"
echo "# tally project" > "$WORK/project/README.md"
git -C "$WORK/project" add README.md
git -C "$WORK/project" commit --quiet -m "initial"
git clone --quiet --bare "$WORK/project" "$WORK/remote.git"
for host in host-a host-b; do git clone --quiet "$WORK/remote.git" "$WORK/$host"; done

echo "== runner init"
"$RUNNER" init --repo "$WORK/host-a"

echo "== runner.toml: the fake agent in every role (a person's commit on the queue branch)"
git clone --quiet --branch runner/queue "$WORK/remote.git" "$WORK/person"
"$VENV/bin/python" - "$WORK/person/runner.toml" "$AGENT" <<'EOF'
import json, sys
from pathlib import Path
from runner.agents.presets import with_agent_tables

path, agent = Path(sys.argv[1]), sys.argv[2]
def command(role, *extra):
    return json.dumps([agent, role, "--prompt-file", "{prompt_file}", *extra])
tables = f"""\
# The stand-in agent of examples/agent-plan in every role (a real agent: runner init --agent NAME).
[harness]
command = {command("implement", "--output", "{output}", "--notes", "{notes_file}")}

[roles.orient]
command = {command("orient")}

[roles.verify]
command = {command("verify")}

[roles.review]
command = {command("review", "--diff", "{diff_file}")}
min_files = 1               # review every change in the demo
boundaries = []

[roles.sweep]
command = {command("sweep")}

[roles.orchestrate]
command = {command("orchestrate", "--verdict", "{verdict}")}
"""
path.write_text(with_agent_tables(path.read_text(), tables))
EOF
git -C "$WORK/person" diff --stat
git -C "$WORK/person" commit --quiet -am "runner.toml: the fake agent fills every role"
git -C "$WORK/person" push --quiet origin runner/queue

echo "== import the agent plan"
"$RUNNER" import "$ROOT/examples/agent-plan" --repo "$WORK/host-a"
"$RUNNER" validate --repo "$WORK/host-a"
"$RUNNER" status --repo "$WORK/host-a"

drain() {
    local pids=()
    for host in host-a host-b; do
        "$RUNNER" worker --id "$host" --once --interval 0.3 --repo "$WORK/$host" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || true; done
}

echo "== two workers drain it (runner worker --once)"
drain
"$RUNNER" status --repo "$WORK/host-a"

merged_before_approval="$(git -C "$WORK/remote.git" ls-tree -r --name-only runner/integration -- tests/test_tally.py)"

echo "== a person approves the step that asks for it"
"$RUNNER" approve 03-tests --by alice --repo "$WORK/host-a" || echo "(approve failed: see above)"
drain  # a worker merges what the approval released, where runner does that after approval

echo "== the result"
"$RUNNER" status --repo "$WORK/host-a"
"$RUNNER" log --repo "$WORK/host-a" --limit 30
git -C "$WORK/remote.git" log --oneline --graph runner/integration
git -C "$WORK/remote.git" ls-tree -r --name-only runner/integration
git clone --quiet --branch runner/integration "$WORK/remote.git" "$WORK/result"
(cd "$WORK/result" && python3 -m unittest discover -s tests 2>&1 | tail -3) || true

echo "== what each part of the pipeline left behind"
queue_file() { git -C "$WORK/remote.git" show "runner/queue:$1" 2>/dev/null || true; }
handoffs="$(for s in 01-count 02-cli 03-tests; do queue_file "plans/handoffs/$s.md"; done)"
logs="$(cat "$WORK"/host-*/.git/runner/logs/steps/*.log 2>/dev/null || true)"
prompt_heads="$(find "$WORK"/host-*/.git/runner -name '*prompt*' -type f -exec head -n 1 {} \; 2>/dev/null || true)"
missing=0
check() {  # check NAME WHERE-TEXT PATTERN
    if grep -qE -- "$3" <<<"$2"; then echo "  ok       $1"; else echo "  MISSING  $1"; missing=$((missing + 1)); fi
}
check "role prompts in plans/prompts/ (runner init)" "$(git -C "$WORK/remote.git" ls-tree --name-only runner/queue plans/prompts/)" "implement.md"
check "the prompt file starts with the role's prompt" "$prompt_heads" "^# Role: "
check "orient ran (deviation: none)" "$logs$handoffs" "deviation: none"
check "implement's {output} file in the handoff" "$handoffs" "fake-agent's final answer file"
check "gates ran the Automated Verification" "$handoffs" "python3 -m tally --help"
check "verify ran ([roles.verify], a JSON verdict)" "$logs$handoffs" "fake-agent verdict|\"pass\": true"
check "review ran (findings in the handoff)" "$handoffs" "No critical findings"
check "sweep ran (edge cases in the handoff)" "$handoffs" "unicode spaces"
check "orchestrate ran after the verifier" "$logs$handoffs" "no plan change"
check "{notes_file} lines appended to plans/NOTES.md" "$(queue_file plans/NOTES.md)" "01-count wrote"
check "a person approved 03-tests" "$("$RUNNER" log 03-tests --repo "$WORK/host-a" 2>/dev/null)" "approve"
check "approval gates the merge (03-tests not merged before it)" "${merged_before_approval:-held}" "^held$"
check "03-tests merged into runner/integration" "$(git -C "$WORK/remote.git" ls-tree -r --name-only runner/integration)" "tests/test_tally.py"

echo
echo "demo repository kept in $WORK (git -C $WORK/remote.git log runner/queue is the audit trail)"
"$RUNNER" status --repo "$WORK/host-a" --json | python3 -c "import json,sys; s=json.load(sys.stdin)['steps']; bad=['%s (%s)' % (x['step'], x['status']) for x in s if x['status']!='done']; sys.exit('not done: %s' % ', '.join(bad) if bad else 0)"
[ "$missing" -eq 0 ] || { echo "$missing part(s) of the pipeline left nothing behind" >&2; exit 1; }
