"""One run from launch to row: launch and topology, preflight, the run directory, the supervisor,
the worker's events folded into a state and a snapshot, the status contract, the summary row."""
