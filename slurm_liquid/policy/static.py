"""static: the daemon's slot changes nothing (`[elastic] policy = static`); jobs keep what they started with."""

from __future__ import annotations

from slurm_liquid.views import ClusterView, Decision


class Static:
    name = "static"

    def reset(self) -> None:
        pass

    def decide(self, view: ClusterView) -> Decision:
        return Decision()
