"""Checkpoints: safetensors for tensors plus a JSON spec. Nothing is ever pickled or unpickled.

Layout in a checkpoint folder, for a checkpoint ``name`` ('best', 'last', ...)::

    <name>-<sha256[:16]>.safetensors        model state (parameters and BatchNorm buffers)
    <name>-optim-<sha256[:16]>.safetensors  optimizer state flattened to tensors (optional)
    <name>.json                              the spec: architecture, in_channels, preprocessing,
                                             train config, metrics, data versions, epoch, parameter
                                             count and shapes, file names and their sha256

Tensor files are content-addressed and written first (temp file + os.replace); the spec is written
last, atomically, and only then are files of the previous version deleted. A reader therefore sees
either the previous complete checkpoint or the new complete one, never a half-written one, and a
killed writer leaves the previous version loadable. :func:`save_checkpoint` (from a model),
:func:`write_spec` (a new spec for the same tensors, e.g. with final metrics) follow this rule;
``runs.published_files`` gives a finished checkpoint's files in the same order for publication.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import InputError
from .models import build_model, count_parameters
from .preprocess import PreprocessSpec

FORMAT = "dhs-checkpoint/1"


@dataclass(frozen=True)
class CheckpointSpec:
    """The JSON side of a checkpoint. ``preprocess``, ``temperature`` and ``dihedral_views`` are all
    scoring needs besides the model."""

    name: str
    architecture: str
    in_channels: int
    preprocess: PreprocessSpec
    param_count: int
    param_shapes: dict
    weights_file: str
    weights_sha256: str
    epoch: int = 0
    global_step: int = 0
    train_config: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    data_versions: dict = field(default_factory=dict)
    training_state: dict = field(default_factory=dict)
    optimizer_file: str | None = None
    optimizer_sha256: str | None = None
    optimizer_meta: dict | None = None
    #: calibration temperature T: scores are sigmoid(logit / T) (see training.calibration)
    temperature: float = 1.0
    #: the architecture's own arguments (a stacked ensemble's members and hidden width)
    arch_args: dict = field(default_factory=dict)
    #: scoring averages the logits over this many of the stamp's flips and rotations (1, 2, 4 or 8:
    #: preprocess.DIHEDRAL_SUBGROUPS; see inference)
    dihedral_views: int = 1
    format: str = FORMAT

    def to_dict(self) -> dict:
        d = asdict(self)
        d["preprocess"] = self.preprocess.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = "<spec>") -> "CheckpointSpec":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise InputError(
                f"{where}: not a {FORMAT} checkpoint spec (format={d.get('format') if isinstance(d, dict) else None!r})"
            )
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise InputError(f"{where}: unknown spec fields {sorted(unknown)}")
        kw = dict(d)
        kw["preprocess"] = PreprocessSpec.from_dict(kw.get("preprocess", {}))
        try:
            return cls(**kw)
        except TypeError as exc:
            raise InputError(f"{where}: incomplete checkpoint spec: {exc}") from exc

    @property
    def data_version(self) -> str:
        """Content hash of what scores a stamp (use as the Dagster data version and the search's
        ``model_version``): the weights' sha256, and with more than one dihedral view a hash of it
        and the views, since the same weights averaged over other views give other scores."""
        if self.dihedral_views == 1:
            return self.weights_sha256
        return hashlib.sha256(f"{self.weights_sha256}:dihedral_views={self.dihedral_views}".encode()).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and os.replace."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_tensors(folder: Path, prefix: str, tensors: dict[str, torch.Tensor]) -> tuple[str, str]:
    """Write ``tensors`` content-addressed as <prefix>-<sha16>.safetensors; returns (file name, sha256)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{prefix}.", suffix=".tmp")
    os.close(fd)
    try:
        # safetensors refuses shared or non-contiguous storage: give it private contiguous CPU copies
        save_file({k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}, tmp)
        sha = sha256_file(tmp)
        fname = f"{prefix}-{sha[:16]}.safetensors"
        os.replace(tmp, folder / fname)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return fname, sha


def _flatten_optimizer(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"state.{pid}.{k}"] = v
            elif isinstance(v, (int, float, bool)) or v is None:
                scalars.setdefault(str(pid), {})[k] = v
            else:
                raise InputError(f"optimizer state {k!r} of type {type(v).__name__} cannot be stored without pickle")
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    tuple_keys = sorted({k for g in sd["param_groups"] for k, v in g.items() if isinstance(v, tuple)})
    return tensors, {"param_groups": groups, "scalars": scalars, "tuple_keys": tuple_keys}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        _, pid, k = key.split(".", 2)
        state.setdefault(int(pid), {})[k] = v
    for pid, st in meta.get("scalars", {}).items():
        state.setdefault(int(pid), {}).update(st)
    tuple_keys = set(meta.get("tuple_keys", []))
    groups = [{k: (tuple(v) if k in tuple_keys else v) for k, v in g.items()} for g in meta["param_groups"]]
    return {"state": state, "param_groups": groups}


def save_checkpoint(
    folder: str | os.PathLike,
    name: str,
    model: torch.nn.Module,
    *,
    architecture: str,
    in_channels: int,
    preprocess: PreprocessSpec,
    train_config: dict | None = None,
    metrics: dict | None = None,
    data_versions: dict | None = None,
    epoch: int = 0,
    global_step: int = 0,
    training_state: dict | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    arch_args: dict | None = None,
    temperature: float = 1.0,
) -> CheckpointSpec:
    """Write checkpoint ``name`` into ``folder`` atomically (spec last) and return its spec."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", name):
        raise InputError(f"checkpoint name must be alphanumeric/underscore, got {name!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = model.state_dict()
    wfile, wsha = _write_tensors(folder, name, state)
    ofile = osha = ometa = None
    if optimizer is not None:
        otensors, ometa = _flatten_optimizer(optimizer)
        ofile, osha = _write_tensors(folder, f"{name}-optim", otensors)
    spec = CheckpointSpec(
        name=name,
        architecture=architecture,
        in_channels=int(in_channels),
        preprocess=preprocess,
        param_count=count_parameters(model),
        param_shapes={k: list(v.shape) for k, v in state.items()},
        weights_file=wfile,
        weights_sha256=wsha,
        epoch=int(epoch),
        global_step=int(global_step),
        train_config=dict(train_config or {}),
        metrics=dict(metrics or {}),
        data_versions=dict(data_versions or {}),
        training_state=dict(training_state or {}),
        optimizer_file=ofile,
        optimizer_sha256=osha,
        optimizer_meta=ometa,
        temperature=float(temperature),
        arch_args=dict(arch_args or {}),
    )
    return write_spec(folder, spec)


def tensor_files_of(name: str, file_names, keep=()) -> list[str]:
    """The names among ``file_names`` that are tensor files of checkpoint ``name`` (weights or
    optimizer, any version), except those in ``keep``: the superseded files of a commit."""
    pattern = re.compile(rf"{re.escape(name)}(-optim)?-[0-9a-f]{{16}}\.safetensors")
    keep = set(keep)
    return sorted(n for n in file_names if pattern.fullmatch(n) and n not in keep)


def spec_bytes(spec: CheckpointSpec) -> bytes:
    """The spec file's contents (JSON, UTF-8)."""
    return json.dumps(spec.to_dict(), indent=1, sort_keys=True, allow_nan=True).encode("utf-8")


def write_spec(folder: str | os.PathLike, spec: CheckpointSpec) -> CheckpointSpec:
    """Commit ``spec`` as checkpoint ``spec.name`` of ``folder``: its tensor files must already be
    there. Writes the spec atomically, then deletes the superseded tensor files of that name."""
    folder = Path(folder)
    for fname in (spec.weights_file, spec.optimizer_file):
        if fname is not None and not (folder / fname).is_file():
            raise InputError(
                f"checkpoint {spec.name!r} in {folder}: tensor file {fname} is missing; write tensors before the spec"
            )
    atomic_write_bytes(folder / f"{spec.name}.json", spec_bytes(spec))
    for stale in tensor_files_of(
        spec.name, (p.name for p in folder.iterdir()), keep={spec.weights_file, spec.optimizer_file}
    ):
        (folder / stale).unlink()
    return spec


def has_checkpoint(folder: str | os.PathLike, name: str) -> bool:
    return (Path(folder) / f"{name}.json").is_file()


def read_spec(folder: str | os.PathLike, name: str = "best") -> CheckpointSpec:
    """The JSON spec of checkpoint ``name`` in ``folder`` (no tensors are read)."""
    path = Path(folder) / f"{name}.json"
    if not path.is_file():
        pickles = sorted(
            p.name for p in Path(folder).glob("*") if p.suffix in (".pt", ".pth", ".pkl", ".pickle", ".ckpt")
        )
        found = f"; found {', '.join(pickles)}, a pickled checkpoint, which is never loaded" if pickles else ""
        raise InputError(
            f"no checkpoint spec {path}: a checkpoint is '<name>.json' plus safetensors files "
            f"(pickled .pt/.pth files are never loaded){found}"
        )
    try:
        d = json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"checkpoint spec {path} is not valid JSON: {exc}") from exc
    return CheckpointSpec.from_dict(d, where=str(path))


def _load_verified(folder: Path, fname: str | None, sha: str | None, what: str) -> dict[str, torch.Tensor]:
    if not fname or not sha or Path(fname).name != fname or not fname.endswith(".safetensors"):
        raise InputError(f"checkpoint in {folder}: {what} file entry {fname!r} is not a local .safetensors name")
    path = folder / fname
    if not path.is_file():
        raise InputError(f"checkpoint in {folder}: {what} file {fname} is missing")
    actual = sha256_file(path)
    if actual != sha:
        raise InputError(f"checkpoint {path}: sha256 {actual[:16]}… does not match the spec's {sha[:16]}…")
    try:
        return load_file(str(path), device="cpu")
    except SafetensorError as exc:
        raise InputError(f"checkpoint {path} is not a valid safetensors file: {exc}") from exc


def _check_and_load_state(
    model: torch.nn.Module, state: dict[str, torch.Tensor], spec: CheckpointSpec, where: str
) -> None:
    expected = {k: list(v.shape) for k, v in model.state_dict().items()}
    stored = {k: list(v.shape) for k, v in state.items()}
    if stored != spec.param_shapes:
        raise InputError(f"{where}: tensors in the weights file do not match the spec's param_shapes")
    missing = sorted(set(expected) - set(stored))
    unexpected = sorted(set(stored) - set(expected))
    shape_diff = sorted(k for k in set(expected) & set(stored) if expected[k] != stored[k])
    if missing or unexpected or shape_diff:
        raise InputError(
            f"{where}: weights do not fit architecture {spec.architecture!r} with {spec.in_channels} input channels: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}, shape mismatch "
            f"{[(k, stored[k], expected[k]) for k in shape_diff[:5]]}"
        )
    model.load_state_dict(state, strict=True)
    if count_parameters(model) != spec.param_count:
        raise InputError(f"{where}: model has {count_parameters(model)} parameters, the spec says {spec.param_count}")


def load_checkpoint(
    folder: str | os.PathLike, name: str = "best", device: str | torch.device = "cpu"
) -> tuple[torch.nn.Module, CheckpointSpec]:
    """(model in eval mode on ``device``, spec) of checkpoint ``name`` in ``folder``.

    Raises InputError when the spec is missing or malformed, the weights file is missing, is not
    safetensors or fails its sha256, or the tensors do not match the architecture/in_channels/shapes.
    """
    folder = Path(folder)
    spec = read_spec(folder, name)
    where = str(folder / f"{name}.json")
    expected_in = spec.preprocess.out_channels(3)
    if spec.in_channels != expected_in:
        raise InputError(
            f"{where}: in_channels {spec.in_channels} does not match the preprocessing spec ({expected_in} channels)"
        )
    state = _load_verified(folder, spec.weights_file, spec.weights_sha256, "weights")
    model = build_model(spec.architecture, spec.in_channels, **spec.arch_args)
    _check_and_load_state(model, state, spec, where)
    return model.to(device).eval(), spec


def load_training_state(
    folder: str | os.PathLike, name: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> CheckpointSpec:
    """Restore ``model`` and ``optimizer`` in place from checkpoint ``name`` (for resuming); returns its spec."""
    folder = Path(folder)
    spec = read_spec(folder, name)
    where = str(folder / f"{name}.json")
    state = _load_verified(folder, spec.weights_file, spec.weights_sha256, "weights")
    _check_and_load_state(model, state, spec, where)
    if spec.optimizer_meta is None:
        raise InputError(f"{where}: checkpoint holds no optimizer state, cannot resume from it")
    otensors = _load_verified(folder, spec.optimizer_file, spec.optimizer_sha256, "optimizer")
    optimizer.load_state_dict(_unflatten_optimizer(otensors, spec.optimizer_meta))
    return spec
