"""Dagster resources of the lakehouse, configured from the environment (see README).

The names below load their module when first used, so that ``resources.settings`` and
``resources.storage`` (no Dagster) can be imported by the Pipes workers without Dagster.
"""

from importlib import import_module

_EXPORTS = {
    "build_resources": "config",
    "LakeResource": "lake",
    "SurveyResource": "survey",
    "ComputeResource": "compute",
}

__all__ = ["build_resources", "LakeResource", "SurveyResource", "ComputeResource"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
