"""Slurm: a profile submitted as one batch job (``fttui submit``), one node's part of a job inside
``srun``, the allocation read from Slurm's environment, and how Slurm's verdict changes a node's
status and row. Scheduler commands run here (and in :mod:`fttui.monitor.slurm`), nowhere else in
the run packages.
"""
