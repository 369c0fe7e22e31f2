"""Placement fed by the live cluster's state, through the Slurm client."""

from __future__ import annotations

import pytest

from slurm_liquid.placement import ClusterState, PlacementRequest
from slurm_liquid.placement.liquid import LiquidBestFit
from tests.integration.cluster import Cluster, wait_for

pytestmark = pytest.mark.integration


def test_liquid_places_on_what_slurm_reports_free(cluster: Cluster) -> None:
    client = cluster.client
    # a job of an earlier test may still be completing (node epilogs run): start from an idle cluster
    wait_for("every GPU to be free", lambda: ClusterState.from_nodes(client.nodes()).gpus_free == 16, timeout=90)
    busy = client.submit("#!/bin/sh\nsleep 120\n", ["--gres=gpu:3", "-w", "gpu01", "--output=/dev/null"])
    try:
        wait_for(f"job {busy} to run", lambda: client.job(busy).is_running)
        state = ClusterState.from_nodes(client.nodes())
        assert state.nodes["gpu01"].gpus_free == 1 and state.gpus_free == 13
        placer = LiquidBestFit(client.topology())
        # 6 GPUs do not fit one node; gpu01+gpu02 (leaf1) offer only 5, so leaf2 takes the whole job.
        placement = placer.place(PlacementRequest("live-6", 6), state)
        assert placement.placed and set(placement.nodes) == {"gpu03", "gpu04"}
        assert sum(placement.nodes.values()) == 6
        # 1 GPU fills the partly used node rather than opening an empty one.
        assert dict(placer.place(PlacementRequest("live-1", 1), state).nodes) == {"gpu01": 1}
    finally:
        client.cancel(busy)
