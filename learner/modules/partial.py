"""A user's ``nn.Module`` with its partial models: extract and assign canonical vectors.

:class:`PartialModule` wraps the module (``forward`` is the module's) and moves a
shared model in or out as one float64 vector on the host: ``extract`` gathers
the model's pieces on the module's device and copies them to the host in one
transfer, ``assign`` copies the vector to the device in one transfer and
scatters it. A vector assigned and not trained since is read back from the
host copy (tensor version counters say whether anything wrote to them), so a
round of gossip costs one transfer each way per model. ``transfers`` counts
them (tests count them on the CPU; docs/design/partial-models.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from learner.modules.layout import Inventory, ModuleLayout, Piece, TensorInfo
from learner.network import checked_vector

__all__ = ["PartialModule", "inventory_of"]



def inventory_of(module: nn.Module) -> Inventory:
    """Every parameter and buffer of ``module`` (names as ``state_dict`` writes them)."""
    tensors = [TensorInfo(name, tuple(int(s) for s in p.shape), str(p.dtype).removeprefix("torch."),
                          True, p.is_floating_point())
               for name, p in module.named_parameters()]
    tensors += [TensorInfo(name, tuple(int(s) for s in b.shape),
                           str(b.dtype).removeprefix("torch."), False, b.is_floating_point())
                for name, b in module.named_buffers()]
    return Inventory(tuple(tensors))


class PartialModule(nn.Module):
    """``module`` cut into the partial models of ``layout``.

    ``rebuild(seed)`` makes the same architecture afresh with a seeded
    initialisation: every shared model starts from the build seeded by its
    fingerprint (the same values on every holder), the rest stays as ``module``
    was built (from the node's seed).
    """

    def __init__(self, module: nn.Module, layout: ModuleLayout,
                 rebuild: Callable[[int], nn.Module], *, input_shape: Sequence[int],
                 seed: int = 0) -> None:
        super().__init__()
        self.module = module
        self.layout = layout
        self.seed = int(seed)
        self.input_shape = tuple(int(s) for s in input_shape)
        self._rebuild = rebuild
        self._index: dict[tuple[str, str], torch.Tensor] = {}
        self._initial: dict[str, np.ndarray] = {}
        self._written: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}
        self.transfers = {"to_device": 0, "to_host": 0}
        for name in layout.shared_models:
            self.assign(name, self.initial_values(name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)

    # ---------------------------------------------------------------- pieces
    def _tensors(self, module: nn.Module | None = None) -> dict[str, torch.Tensor]:
        source = self.module if module is None else module
        found: dict[str, torch.Tensor] = dict(source.named_parameters())
        found.update(dict(source.named_buffers()))
        return found

    def _index_on(self, name: str, piece: Piece, device: torch.device) -> torch.Tensor:
        key = (name, piece.tensor)
        index = self._index.get(key)
        if index is None or index.device != device:
            assert piece.index is not None
            index = torch.from_numpy(piece.index).to(device)
            self._index[key] = index
        return index

    def _gather(self, name: str, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = []
        for piece in self.layout.pieces(name):
            flat = tensors[piece.tensor].detach().reshape(-1)
            if piece.index is not None:
                flat = flat[self._index_on(name, piece, flat.device)]
            parts.append(flat.to(torch.float64))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _versions(self, name: str, tensors: dict[str, torch.Tensor]) -> tuple[int, ...]:
        return tuple(tensors[p.tensor]._version for p in self.layout.pieces(name))

    # ----------------------------------------------------------- move in/out
    def extract(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Canonical float64 vector of shared model ``name`` (a copy, on the host)."""
        n = self.layout.vector_length(name)
        if out is not None and (out.dtype != np.float64 or out.shape != (n,)):
            raise ValueError(f"extract({name!r}): out must be float64 of shape ({n},), got "
                             f"{out.dtype} {out.shape}")
        tensors = self._tensors()
        written = self._written.get(name)
        if written is not None and written[0] == self._versions(name, tensors):
            values = written[1]
        else:
            with torch.no_grad():
                values = self._gather(name, tensors).cpu().numpy()
            self.transfers["to_host"] += 1  # counted on the CPU too: tests check it
        if out is None:
            return np.array(values, dtype=np.float64, copy=True)
        np.copyto(out, values)
        return out

    def assign(self, name: str, vector: np.ndarray) -> None:
        """Write shared model ``name``'s canonical vector into the module's tensors.

        ValueError (naming the model) on a wrong shape or dtype or a value that is
        not a finite float32; the tensors are then untouched.
        """
        vec = checked_vector(name, vector, self.layout.vector_length(name))
        tensors = self._tensors()
        pieces = self.layout.pieces(name)
        device = tensors[pieces[0].tensor].device
        single = np.ascontiguousarray(vec, dtype=np.float32)
        with torch.no_grad():
            source = torch.from_numpy(single).to(device)
            self.transfers["to_device"] += 1
            for piece in pieces:
                tensor = tensors[piece.tensor]
                part = source[piece.offset:piece.offset + piece.size].to(tensor.dtype)
                if piece.index is None:
                    tensor.copy_(part.view(tensor.shape))
                elif tensor.is_contiguous():
                    tensor.view(-1)[self._index_on(name, piece, device)] = part
                else:
                    flat = tensor.reshape(-1).clone()
                    flat[self._index_on(name, piece, device)] = part
                    tensor.copy_(flat.view(tensor.shape))
        # what the module holds now (float32-rounded), valid until a tensor is written
        self._written[name] = (self._versions(name, tensors), single.astype(np.float64))

    def initial_values(self, name: str) -> np.ndarray:
        """Shared model ``name``'s first values: the same on every holder (seeded build)."""
        values = self._initial.get(name)
        if values is None:
            fresh = self._rebuild(self.layout.init_seed(name))
            with torch.no_grad():
                values = self._gather(name, self._tensors(fresh)).cpu().numpy()
            self._initial[name] = values
        return values.copy()

    def relayout(self, layout: object) -> None:
        raise ValueError("a network.factory module's partial models are fixed when it is "
                         "built; automatic grouping (clustering.mode = \"auto\") needs a "
                         "notation network")

    def plain_state_dict(self) -> dict[str, torch.Tensor]:
        """The module's own ``state_dict`` (as the user's code names it), on the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}

    def extra_repr(self) -> str:
        return f"shared={list(self.layout.shared_models)}, seed={self.seed}"
