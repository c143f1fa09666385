"""Dagster assets of the lakehouse: one module per stage, thin wrappers over ``darkhaloscope``."""
