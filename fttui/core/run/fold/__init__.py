"""What a run's events and samples mean: pure folds of the records into a :class:`RunSnapshot`
(progress and rates, memory and its trend, the verdict, startup phases, ranks) and the diagnoses the
snapshot carries (why slow, per-card figures, the words every view uses), the status line. No I/O
and no processes: it reads records handed to it, and imports only :mod:`fttui.core.run.files`.
"""
