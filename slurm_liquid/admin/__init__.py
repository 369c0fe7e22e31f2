"""What a site's admin runs: `slurm-liquid admin install` (the Slurm files, units and docs this package
ships) and `slurm-liquid doctor` (is this controller or GPU node set up right, and how to fix it)."""
