"""What the commands share (`cli/common.py`): output claims (staged, published whole, exclusive,
nothing left when the work fails), the checkpoint a command loads within its memory budget, the
results a command publishes, the line and exit code of a stopped command, argument types, and
--threads reaching every BLAS library. The options every computing command takes (--threads,
--device) are refused on each in `test_scale.py`."""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys

import matplotlib.pyplot as plt
import pytest
from plants import eagle as planted_model

from eagle_probe import checkpoint
from eagle_probe.cli import common
from eagle_probe.errors import EagleProbeError, Terminated


def _args(max_memory: float = 4.0, **fields) -> argparse.Namespace:
    """The namespace `main` hands a command: its claims held by `outputs`, --max-memory in GiB."""
    return argparse.Namespace(
        outputs=contextlib.ExitStack(), force=False, max_memory=max_memory, **fields
    )


def test_a_claimed_directory_appears_whole_when_published(tmp_path):
    out = tmp_path / "results"
    args = _args()
    staging = common.claim_dir(args, out)
    (staging / "a.json").write_text("{}\n")
    assert staging.parent == tmp_path and staging != out and not out.exists()
    common.publish(args)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    assert (out / "a.json").read_text() == "{}\n"


def test_a_claim_whose_command_fails_leaves_nothing(tmp_path):
    args = _args()
    with pytest.raises(RuntimeError, match="the work failed"):
        with args.outputs:
            staging = common.claim_dir(args, tmp_path / "results")
            (staging / "half.json").write_text("{")
            raise RuntimeError("the work failed")
    assert list(tmp_path.iterdir()) == []


def test_of_two_claims_on_one_directory_the_second_is_refused_not_merged(tmp_path):
    out = tmp_path / "results"
    first, second = _args(), _args()
    a, b = common.claim_dir(first, out), common.claim_dir(second, out)
    (a / "first.json").write_text("1\n")
    (b / "second.json").write_text("2\n")
    common.publish(first)
    with pytest.raises(EagleProbeError, match="filled by another run meanwhile; not overwritten"):
        common.publish(second)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    assert sorted(p.name for p in out.iterdir()) == ["first.json"]


def test_load_model_reads_the_checkpoint_within_the_budget(tmp_path):
    model, task = planted_model([0.05, 0.04], [0.09, 0.08])
    path = tmp_path / "planted.pt"
    checkpoint.save(path, model, task)
    got, got_task = common.load_model(_args(model=path))
    assert got_task == task and got.cfg == model.cfg
    for name, value in model.state_dict().items():
        assert got.state_dict()[name].equal(value), name
    with pytest.raises(EagleProbeError) as err:
        common.load_model(_args(model=path, max_memory=1e-6))
    text = str(err.value)
    assert "\n" not in text and "above the budget of 1e-06 GiB" in text and "--max-memory" in text


class _Result:
    """What a command's work returns: its JSON (with the timings so far) and its report."""

    def __init__(self) -> None:
        self.json = {"timings": {"work": 0.25}, "layers": [1, 2]}

    def render(self) -> str:
        return "the report"


def test_publish_results_writes_the_json_and_one_png_per_figure_then_prints(tmp_path, capsys):
    def figures(payload):
        fig, ax = plt.subplots()
        ax.plot(payload["layers"])
        return {"layers": fig}

    out, args = tmp_path / "res", _args()
    staging = common.claim_dir(args, out)
    common.publish_results(args, out, staging, "thing", _Result(), figures, start=0.0)
    data = json.loads((out / "thing.json").read_text())
    assert data["layers"] == [1, 2] and data["timings"]["work"] == 0.25
    assert data["timings"]["total"] > 0  # the time since `start`
    assert (out / "layers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["layers.png", "thing.json"]
    assert capsys.readouterr().out.splitlines() == [
        "the report",
        f"wrote {out / 'thing.json'} and layers.png",
    ]


@pytest.mark.parametrize(
    "stop, line, code",
    [
        (KeyboardInterrupt(), "eagle-probe: interrupted", 128 + signal.SIGINT),
        (Terminated(), "eagle-probe: terminated (SIGTERM); nothing written", 128 + signal.SIGTERM),
        (
            Terminated(signal.SIGHUP, "stopped at step 40; wrote run.pt"),
            "eagle-probe: stopped at step 40; wrote run.pt",
            128 + signal.SIGHUP,
        ),
    ],
)
def test_a_stopped_command_says_so_in_one_line_and_exits_128_plus_the_signal(stop, line, code):
    assert common.stopped_line(stop) == (line, code)


@pytest.mark.parametrize(
    "parse, text, words",
    [
        (common.positive_int, "0", "expected a positive integer, got '0'"),
        (common.positive_int, "1.5", "expected a positive integer, got '1.5'"),
        (common.seed_value, str(2**32), "expected a seed below 2**32"),
        (common.gib, "nan", "expected a finite number, got 'nan'"),
        (common.gib, "-1", "expected a positive number of GiB, got '-1'"),
        (common.thread_count, "5000", "expected at most 1,024 threads, got '5000'"),
        (common.finite_float32, "1e39", "within float32's range"),
        (common.more_steps, "1000000000", "about 694 days per layer"),
    ],
)
def test_argument_types_refuse_in_words_that_name_the_value(parse, text, words):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse(text)
    assert words in str(err.value)


def test_argument_types_accept_their_range():
    assert common.positive_int("3") == 3 and common.seed_value("0") == 0
    assert common.seed_value(str(2**32 - 1)) == 2**32 - 1 and common.gib("0.5") == 0.5
    assert common.thread_count("1024") == 1024


THREADS_PROBE = """
import ctypes, glob, os, sys
import numpy as np
from eagle_probe.cli.common import set_threads
import scipy.linalg  # loads SciPy's own OpenBLAS
set_threads(int(sys.argv[1]))
import torch
site = os.path.join(os.path.dirname(np.__file__), os.pardir)
counts = [torch.get_num_threads()]
for d, fn in (("numpy.libs", "scipy_openblas_get_num_threads64_"),
              ("scipy.libs", "scipy_openblas_get_num_threads")):
    for path in glob.glob(os.path.join(site, d, "*openblas*")):
        lib = ctypes.CDLL(path)
        if hasattr(lib, fn):
            counts.append(getattr(lib, fn)())
print(*counts)
"""


@pytest.mark.parametrize("count", [1, 2])
def test_threads_reach_torch_and_both_bundled_openblas_libraries(count):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", THREADS_PROBE, str(count)],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert len(out) == 3, out  # torch, NumPy's OpenBLAS, SciPy's OpenBLAS
    assert out == [str(count)] * 3
