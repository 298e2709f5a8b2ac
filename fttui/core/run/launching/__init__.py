"""From a resolved profile to a launched run: the preflight checks, the launcher and its
argument list, the run directory made, the supervisor started; resuming a run and recovering from an
out of memory by a new attempt; a user's command as a run. It may not fold a row or supervise.
"""
