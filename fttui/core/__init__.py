"""The core of fttui: torch-, Textual- and Rich-free, layered top to bottom as
experiments > run | memory > results > profiles > models | data > base (import-linter contracts in
pyproject.toml; docs/architecture.md)."""
