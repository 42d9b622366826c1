"""`p2p run` and `p2p config` with the user's code: bad input is one line, exit 2, nothing
created; `p2p export` writes a state_dict a fresh module loads."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from p2p.cli.main import main

USER_CODE = '''
import torch
from torch import nn
from torch.utils.data import TensorDataset


def mlp(input_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, num_classes))


def seven(input_shape):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 7))


def listing():
    return [1]


NUMBER = 3


def gated():
    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 8), nn.Linear(8, 10)

        def forward(self, x):
            h = self.a(x.flatten(1))
            return self.b(torch.softmax(h, dim=1) * h)
    return Gated()


def rows(node_index):
    return (TensorDataset(torch.rand(40, 64), torch.randint(0, 10, (40,))),
            TensorDataset(torch.rand(10, 64), torch.randint(0, 10, (10,))))


class Ragged(torch.utils.data.Dataset):  # item 0 looks right, the others are shorter
    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.rand(64 if i == 0 else 63), i % 10


def ragged():
    return {"train": Ragged(), "num_classes": 10,
            "test": TensorDataset(torch.rand(10, 64), torch.randint(0, 10, (10,)))}


def texts():
    return [("text", 1)] * 4, [("text", 1)] * 2


def odd_rows():  # the test set's inputs have another shape
    return (TensorDataset(torch.rand(40, 64), torch.randint(0, 10, (40,))),
            TensorDataset(torch.rand(10, 65), torch.randint(0, 10, (10,))))
'''

DIGITS = '[data]\ntask = "digits"\n'


@pytest.fixture(autouse=True)
def fresh_logging() -> Iterator[None]:
    """The root logger as a new `p2p` process has it: no handler (another test's `p2p
    run` may have left one writing to a stream that is closed by now)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for handler in handlers:
        root.removeHandler(handler)
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize(("config", "fragment"), [
    ('[network]\nfactory = "no_such_pkg.models:build"\n' + DIGITS,
     "no module named 'no_such_pkg'"),
    ('[network]\nfactory = "code.py:NUMBER"\n' + DIGITS, "is an int, not callable"),
    ('[network]\nfactory = "code.py:listing"\n' + DIGITS, "returned a list; expected a torch"),
    ('[network]\nfactory = "code.py:seven"\n' + DIGITS, r"shape \(2, 7\).*expected \(2, 10\)"),
    ('[network]\nfactory = "code.py:mlp"\n[[models]]\nname = "g"\nparams = ["conv*"]\n'
     + DIGITS, "models\\[0\\].params: .*'conv\\*' matches no parameter"),
    ('[network]\nfactory = "code.py:mlp"\n[[models]]\nname = "g"\nparams = ["1.*"]\n'
     '[[models]]\nname = "h"\nparams = ["*.bias"]\n' + DIGITS, "already claimed by partial"),
    ('[network]\nfactory = "code.py:gated"\n[[models]]\nname = "g"\nunits = 0.5\n' + DIGITS,
     "models\\[0\\].units: cannot split the units of layer 'b'"),
    ('[network]\nfactory = "code.py:mlp"\n[training]\ndevice = "cuda"\n' + DIGITS,
     "training.device: 'cuda' asked for, but this machine has no CUDA"),
    ('[network]\nfactory = "code.py:mlp"\n[data]\nfactory = "code.py:odd_rows"\n',
     r"data.factory: .*test set have shape \(65,\)"),
    ('[network]\nfactory = "code.py:mlp"\n[data]\nfactory = "no_such_pkg.data:load"\n',
     "data.factory: .*no module named 'no_such_pkg'"),
    ('[network]\nfactory = "code.py:mlp"\n[data]\nfactory = "code.py:NUMBER"\n',
     "data.factory: .*is an int, not callable"),
    ('[network]\nfactory = "code.py:mlp"\n[data]\nfactory = "code.py:listing"\n',
     "data.factory: .*returned a list; expected \\(train, test\\)"),
    ('[network]\nfactory = "code.py:mlp"\n[data]\nfactory = "code.py:texts"\n',
     "data.factory: .*input of item 0 .* is a str"),
    ('[network]\nfactory = "code.py:mlp"\n[data]\nfactory = "code.py:ragged"\n',
     "data.factory: the first training batch fails"),
])
def test_bad_user_code_is_one_line_exit_2_and_nothing_created(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, fragment: str) -> None:
    if "cuda" in config and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    # a module name of its own per test: a file is imported under its name, once
    name = f"own_{tmp_path.name}"
    (tmp_path / f"{name}.py").write_text(USER_CODE)
    (tmp_path / "node.toml").write_text(config.replace("code.py", f"{name}.py"))
    data_dir = tmp_path / "state"
    for argv in (["run", "--config", str(tmp_path / "node.toml"), "--data-dir", str(data_dir)],
                 ["config", "--config", str(tmp_path / "node.toml")]):
        assert main(argv) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("p2p: error: "), lines
        assert pytest.importorskip("re").search(fragment, lines[0]), lines[0]
        assert not data_dir.exists()  # no identity, lock or checkpoint


def test_export_writes_a_state_dict_a_fresh_module_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from p2p.config import load_config
    from p2p.runtime.node import Node

    (tmp_path / "export_code.py").write_text(USER_CODE)
    (tmp_path / "node.toml").write_text(
        '[network]\nfactory = "export_code.py:mlp"\n[[models]]\nname = "g"\n'
        'params = ["1.*"]\n[data]\nfactory = "export_code.py:rows"\n'
        f'[node]\ndata_dir = "{tmp_path / "state"}"\n')
    node = Node(load_config(tmp_path / "node.toml"))
    trained = {k: v.clone() for k, v in node.learning.network.module.state_dict().items()}
    import trio

    trio.run(node.save_checkpoint)  # what export reads when no node answers
    out = tmp_path / "model.pt"
    assert main(["export", "--data-dir", str(tmp_path / "state"), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    exported = torch.load(out)
    assert set(exported) == set(trained)
    fresh = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 10))
    fresh.load_state_dict(exported)
    assert all(torch.equal(fresh.state_dict()[k], trained[k]) for k in trained)
