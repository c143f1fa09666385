"""The survey layer: sweep/Tractor catalog reader, DR8–DR10 data models, the embedded mock survey
and the known-lens catalog (lenscat)."""

from .sweeps import SweepBox, iter_sweep_batches, parse_sweep_filename, read_sweep, sweep_filename, sweep_to_parquet

__all__ = [
    "SweepBox",
    "iter_sweep_batches",
    "parse_sweep_filename",
    "read_sweep",
    "sweep_filename",
    "sweep_to_parquet",
]
