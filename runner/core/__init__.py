"""The protocol's core: step files, plans, the state machine, the commit codec and the
configuration schema. Pure: no git, no processes, no clock but what callers pass in.
Imports nothing of runner's outer parts (store, queue, worker, hooks, commands)."""
