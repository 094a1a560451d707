"""The queue on a store: snapshots of the plan at the branch tip, publishing one event
per commit by compare-and-swap (with one retry policy), leases and imports."""
