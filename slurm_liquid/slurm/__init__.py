"""The Slurm client: typed jobs, nodes, partitions and topology for every Slurm version we ship."""

from slurm_liquid.slurm.cli_backend import CliBackend
from slurm_liquid.slurm.client import SlurmClient, connect
from slurm_liquid.slurm.errors import SlurmCommandError, SlurmError
from slurm_liquid.slurm.models import Job, Node, Partition, SlurmVersion
from slurm_liquid.slurm.runner import ContainerRunner, LocalRunner

__all__ = ["CliBackend", "ContainerRunner", "Job", "LocalRunner", "Node", "Partition", "SlurmClient",
           "SlurmCommandError", "SlurmError", "SlurmVersion", "connect"]
