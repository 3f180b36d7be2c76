"""Where a run's processes go and how they reach each other: Ray placement, the network,
ports, the local Ray, child processes."""
