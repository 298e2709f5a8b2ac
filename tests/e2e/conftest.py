"""The end-to-end tests' shared fixtures: the Slurm lab (two ``slurmd -N`` on this host), started
once per test worker for the tests of the ``slurm`` xdist group (tests/slurm_cluster.py)."""

from __future__ import annotations

import pytest

from tests import slurm_cluster


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    why = slurm_cluster.why_not()
    if why is not None:
        pytest.skip(f"NO SLURM TEST CLUSTER: {why}")
    cluster = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        slurm_cluster.stop(cluster)
