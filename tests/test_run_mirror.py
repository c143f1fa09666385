"""Training runs kept in object storage (``darkhaloscope.training.run_mirror``, on the loopback S3
server): a run stopped on one host resumes on another from its copy in storage to the weights of an
uninterrupted run, a completed run is reused by a third, and every push writes in commit order
(tensors, figures, specs, the completion record) and leaves storage holding what the run holds."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest
import torch

from darkhaloscope.training import runs
from darkhaloscope.training.loop import TrainConfig
from darkhaloscope.training.run_mirror import RunMirror
from lake_platform.lake import Lake
from tests.support.s3_server import fresh_bucket
from tests.test_training_runs import CONFIG, _no_training, _train, data  # noqa: F401  (fixture)

torch.set_num_threads(1)
pytestmark = [pytest.mark.s3]


class _Recording:
    """The storage's filesystem, recording the names it writes and deletes, in order."""

    def __init__(self, fs):
        self.fs, self.calls = fs, []

    def open_output_stream(self, path, *a, **k):
        self.calls.append(("write", path.rsplit("/", 1)[1]))
        return self.fs.open_output_stream(path, *a, **k)

    def delete_file(self, path):
        self.calls.append(("delete", path.rsplit("/", 1)[1]))
        return self.fs.delete_file(path)

    def __getattr__(self, name):
        return getattr(self.fs, name)


def _stored(fs, root: str, key: str) -> set[str]:
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/runs/{key}", allow_not_found=True))
    return {i.base_name for i in infos if i.type == pafs.FileType.File}


def test_a_run_stopped_on_one_host_resumes_on_another_from_storage(data, tmp_path, s3_server, monkeypatch):  # noqa: F811
    lake = Lake(f"s3://{fresh_bucket(s3_server)}/lake", s3_endpoint=s3_server.endpoint_url)
    root = f"{lake.root}/_inflight/training/lens_finder_runs.files"
    fs = _Recording(lake.fs)
    cfg = TrainConfig(**{**CONFIG.to_dict(), "epochs": 2})
    stopped = _train(
        data,
        tmp_path / "a",
        config=TrainConfig(**{**cfg.to_dict(), "max_minutes": 1e-6}),
        mirror=RunMirror(f"s3://{root}", fs, tmp_path / "a"),
    )
    key = stopped["run_key"]
    assert not stopped["finished"] and stopped["global_step"] == 1
    assert {"last.json"} <= _stored(lake.fs, root, key) and "complete.json" not in _stored(lake.fs, root, key)
    writes = [name for op, name in fs.calls if op == "write"]
    (stopped_tensor,) = [n for n in _stored(lake.fs, root, key) if n.startswith("last-") and "optim" not in n]
    assert writes.index("last.json") > max(i for i, n in enumerate(writes) if n.endswith(".safetensors"))

    # another host, an empty scratch folder: the run resumes from storage
    fs.calls.clear()
    mirror = RunMirror(f"s3://{root}", fs, tmp_path / "b")
    resumed = _train(data, tmp_path / "b", config=cfg, mirror=mirror)
    reference = _train(data, tmp_path / "ref", config=cfg)
    assert resumed["resumed"] and resumed["finished"] and resumed["run_key"] == key
    assert resumed["data_version"] == reference["data_version"]  # the weights of an uninterrupted run
    assert mirror.location(resumed["run_dir"]) == f"s3://{root}/runs/{key}"
    local = {p.name for p in (tmp_path / "b" / "runs" / key).iterdir() if not p.name.startswith(".")}
    assert _stored(lake.fs, root, key) == local  # superseded tensor files removed from storage too
    ops = fs.calls
    written = [n for op, n in ops if op == "write"]
    assert written[-2:] == ["gates.json", "complete.json"]  # the audit's push: the record last
    assert ("delete", stopped_tensor) in ops  # the stopped call's 'last', superseded

    # a third host reuses the completed run: no training, the same model
    monkeypatch.setattr(runs, "train", _no_training)
    reused = _train(data, tmp_path / "c", config=cfg, mirror=RunMirror(f"s3://{root}", lake.fs, tmp_path / "c"))
    assert reused["reused"] and reused["data_version"] == resumed["data_version"]
    assert runs.published_files(reused["run_dir"]) == runs.published_files(resumed["run_dir"])
