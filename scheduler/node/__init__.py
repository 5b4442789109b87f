"""A running node: the daemon's loop and the side threads around it (heartbeat,
recovery, catch-up, requests, pruner), and the commands that act as a node for one
period (`run-once`, trigger, rerun, backfill). See docs/ARCHITECTURE.md."""
