"""Commands over the engine: measuring, plotting, training (floor 1: imports engine, never app or cli)."""
