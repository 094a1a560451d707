"""Where the queue lives: refs, trees, blobs and commits, an atomic multi-ref
compare-and-swap, fetch and worktrees. Knows bytes and refs, never steps."""
