"""The run directory, the contract every part of fttui speaks: its files and their records
(profile.json, command.json, supervisor.json, exit.json, status.json, row.json), the event and
sample lines with their one parser and writer. It owns reading and writing these files; it may not
start, signal or ask about a process, nor ask a scheduler (that is :mod:`fttui.core.run.processes`
and :mod:`fttui.core.run.slurm`). The bottom of the run packages: it imports none of them.
"""
