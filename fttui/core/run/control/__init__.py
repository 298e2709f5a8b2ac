"""A run seen and steered from outside: following a run directory until it ends (:mod:`.watch`),
its one-line brief for lists, and the executor of each kind of run (start, alive, cancel, final
state). The top of the run packages: the CLI and the app come in here or below.
"""
