"""The survey layer: sweep/Tractor catalog reader, DR8–DR10 data models, the mirror's location and
the known-lens catalog (lenscat)."""

from .sweeps import SweepBox, ingest_sweep, iter_sweep_batches, parse_sweep_filename, read_sweep, sweep_filename

__all__ = [
    "SweepBox",
    "ingest_sweep",
    "iter_sweep_batches",
    "parse_sweep_filename",
    "read_sweep",
    "sweep_filename",
]
