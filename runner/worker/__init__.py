"""The worker: the daemon loop, one tick (claim, run in a worktree, verify, record) and
the step pipeline (orient, implement, gates, fix, sweep, review, orchestrate)."""
