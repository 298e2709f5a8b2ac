"""The processes of a run: the one module that signals a process tree (:mod:`.proctree`, one
grace period), process identity and liveness (is the supervisor, the training, Slurm's job still at
work), the run's cgroup, and cancelling. It reads the run directory's records; it never folds
events nor writes a row.
"""
