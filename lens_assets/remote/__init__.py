"""Jobs that run outside the Dagster process, launched through Dagster Pipes."""
