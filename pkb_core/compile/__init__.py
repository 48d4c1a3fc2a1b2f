"""The compile phase: every solution built ahead of its jobs, in builder processes of its own."""
