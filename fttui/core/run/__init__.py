"""One run from launch to row, in packages by concern, each above the ones it may import
(enforced by the import-linter contract "Inside a run" in pyproject.toml):

- :mod:`.control`: a run seen and steered from outside (watch, brief, the executor of each kind);
- :mod:`.supervising`: the supervisor, the log writer, recovery, watching a pid;
- :mod:`.slurm`: a profile as a Slurm job, a node's part of it, Slurm's verdict;
- :mod:`.row`: the final status and the summary row;
- :mod:`.launching`: preflight, the launcher's argument list, the run started, resume, OOM retry;
- :mod:`.fold` and :mod:`.processes` (independent of each other): events and samples folded into
  a snapshot with its diagnoses; the process tree, liveness, cancelling;
- :mod:`.files`: the run directory, its files and records (the contract all of them speak).

docs/architecture.md, "The run packages", says what each owns and how to add an executor.
"""
