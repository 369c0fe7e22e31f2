from slurm_liquid.cli import main

raise SystemExit(main())
