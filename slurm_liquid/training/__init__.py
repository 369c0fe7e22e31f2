"""Training DL2 in the simulator under the rules it will run with (`sim.world.World`, `loop.rules`)."""
