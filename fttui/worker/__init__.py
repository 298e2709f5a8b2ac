"""Training worker: the only part of fttui that imports torch and the training stack.

Entry point: ``python -m fttui.worker.train --run-dir DIR`` (also under ``torchrun``).
It reads ``DIR/profile.json`` and appends events to ``DIR/events.jsonl``
(see docs/architecture.md). Importing this package imports nothing heavy.
"""
