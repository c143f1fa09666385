"""Compute device for simulation, training and scoring (DHS_DEVICE: auto | cpu | cuda)."""


import dagster as dg


class ComputeResource(dg.ConfigurableResource):
    """``device`` is auto (CUDA when present), cpu or cuda; ``profile`` is demo or full."""

    device: str = "auto"
    profile: str = "demo"

    def torch_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"DHS_DEVICE={self.device!r}: expected auto, cpu or cuda")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("DHS_DEVICE=cuda but torch sees no CUDA device")
        return self.device
