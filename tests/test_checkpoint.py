import pickle

import pytest
import torch

from eagle_probe import checkpoint
from eagle_probe.errors import CheckpointError
from eagle_probe.model import LinearTransformer, ModelConfig
from eagle_probe.tasks import TaskConfig, make_generator

CFG = ModelConfig(n=6, d=5, n_prime=2, d_prime=2, n_layers=2)
TASK = TaskConfig(n=6, d=5, n_prime=2, d_prime=2, rank=3)


@pytest.fixture
def saved(tmp_path):
    model = LinearTransformer(CFG, generator=make_generator(0))
    path = tmp_path / "m.pt"
    checkpoint.save(path, model, TASK, {"note": "x", "values": [1.0, 2.0]})
    return path, model


def test_roundtrip(saved):
    path, model = saved
    loaded, task, metrics = checkpoint.load(path)
    assert task == TASK and loaded.cfg == CFG and metrics["values"] == [1.0, 2.0]
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key])
    assert not loaded.training


def test_save_leaves_no_temporary_files(saved):
    path, _ = saved
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.pt"]


def _payload(path):
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda p: p.update(format="other"), "not an eagle-probe checkpoint"),
        (lambda p: p.update(format_version=99), "format version 99"),
        (lambda p: p["model_config"].update(regime="nope"), "unknown regime"),
        (lambda p: p["model_config"].update(n_layers=3), "do not match its config"),
        (lambda p: p["task_config"].update(n=7), "disagree on sizes"),
        (
            lambda p: p["state_dict"].update({"blocks.0.attn.W_Q": torch.zeros(1, 8, 3)}),
            "has shape",
        ),
        (
            lambda p: p["state_dict"].update(
                {"blocks.0.attn.W_Q": p["state_dict"]["blocks.0.attn.W_Q"].double()}
            ),
            "float64",
        ),
        (
            lambda p: p["state_dict"]["blocks.1.attn.W_V"].__setitem__(0, float("nan")),
            "NaN or Inf",
        ),
    ],
)
def test_inconsistent_checkpoints_are_refused(saved, mutate, match):
    path, _ = saved
    payload = _payload(path)
    mutate(payload)
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=match):
        checkpoint.load(path)


def test_unreadable_files(tmp_path, saved):
    path, _ = saved
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path / "missing.pt")
    with pytest.raises(CheckpointError, match="is a directory"):
        checkpoint.load(tmp_path)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="is empty"):
        checkpoint.load(empty)
    truncated = tmp_path / "trunc.pt"
    truncated.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointError, match="not a readable torch file"):
        checkpoint.load(truncated)
    noise = tmp_path / "noise.pt"
    noise.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(CheckpointError):
        checkpoint.load(noise)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    with pytest.raises(CheckpointError, match="not an eagle-probe checkpoint"):
        checkpoint.load(foreign)


class _Exploit:
    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED_MARKER",))


def test_a_pickle_that_would_run_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    evil = tmp_path / "evil.pt"
    torch.save({"format": "eagle-probe", "payload": _Exploit()}, evil)
    with pytest.raises(CheckpointError, match="refused"):
        checkpoint.load(evil)
    assert not (tmp_path / "PWNED_MARKER").exists()
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps(_Exploit()))
    with pytest.raises(CheckpointError):
        checkpoint.load(plain)
    assert not (tmp_path / "PWNED_MARKER").exists()


def test_failed_write_keeps_the_previous_file(saved, monkeypatch):
    path, model = saved
    before = path.read_bytes()

    def boom(obj, handle):
        handle.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, model, TASK)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["m.pt"]
