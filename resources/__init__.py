"""Dagster resources of the lakehouse, configured from the environment (see README)."""

from .config import build_resources
from .lake import LakeResource
from .survey import SurveyResource
from .compute import ComputeResource

__all__ = ["build_resources", "LakeResource", "SurveyResource", "ComputeResource"]
