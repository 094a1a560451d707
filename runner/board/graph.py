"""The plan's dependency graph laid out for drawing: each step in a column by its depth (1 +
the deepest of its dependencies), rows ordered to keep edges short. Iterative: a chain of
thousands of steps needs no deep recursion."""

from __future__ import annotations

from typing import Any

from runner.core.plan import Plan

MAX_DRAWN = 400  # past this many steps the graph is not drawn (the list still shows every step)
MAX_ROWS = 12  # a depth with more steps than this wraps into columns of its own: 200 steps stay a readable block


def layout(plan: Plan) -> dict[str, Any]:
    steps = plan.steps
    if len(steps) > MAX_DRAWN:
        return {"nodes": [], "edges": [], "too_many": len(steps)}
    deps = {sid: [d for d in step.depends_on if d in steps] for sid, step in steps.items()}
    layer = _layers(deps)
    columns: dict[int, list[str]] = {}
    for sid in sorted(steps, key=lambda s: (layer[s], s)):
        columns.setdefault(layer[sid], []).append(sid)
    row: dict[str, float] = {}
    col: dict[str, int] = {}
    first = 0  # the first column of this depth
    for depth in sorted(columns):
        placed = columns[depth]
        if depth > 0:  # near the steps they depend on
            placed.sort(key=lambda s: (sum(row[d] for d in deps[s]) / len(deps[s]) if deps[s] else 0.0, s))
        for index, sid in enumerate(placed):
            row[sid] = float(index)
            col[sid] = first + index // MAX_ROWS
        first += (len(placed) + MAX_ROWS - 1) // MAX_ROWS
    nodes = [
        {
            "id": sid,
            "title": steps[sid].title,
            "status": plan.derived_status(steps[sid]),
            "layer": layer[sid],
            "col": col[sid],
            "row": int(row[sid]) % MAX_ROWS,
        }
        for sid in steps
    ]
    edges = [[dep, sid] for sid in steps for dep in deps[sid]]
    return {"nodes": nodes, "edges": edges, "too_many": 0}


def _layers(deps: dict[str, list[str]]) -> dict[str, int]:
    """Each step's depth by Kahn's order; steps on a cycle (an invalid plan) go last."""
    waiting = {sid: len(ds) for sid, ds in deps.items()}
    dependents: dict[str, list[str]] = {}
    for sid, ds in deps.items():
        for dep in ds:
            dependents.setdefault(dep, []).append(sid)
    layer = {sid: 0 for sid in deps}
    ready = [sid for sid, n in waiting.items() if n == 0]
    while ready:
        sid = ready.pop()
        for nxt in dependents.get(sid, ()):
            layer[nxt] = max(layer[nxt], layer[sid] + 1)
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                ready.append(nxt)
    deepest = max(layer.values(), default=0)
    return {sid: (layer[sid] if waiting[sid] == 0 else deepest + 1) for sid in deps}
