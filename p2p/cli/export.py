"""``p2p export``: the node's current model as a plain ``state_dict`` for use outside the project.

A running node is asked to write a checkpoint first (so the export is its
model of now); then the data directory's checkpoint is read and its network
written with ``torch.save``: the user's module under the names its code gives
(``model.load_state_dict(torch.load(FILE))`` works on a fresh instance), a
notation network per layer (``layer1.weight`` shaped as torch's ``Linear`` or
``Conv2d`` weight, ``layer1.bias``, ...).
"""

from __future__ import annotations

import io
from pathlib import Path

__all__ = ["export_model", "plain_from_checkpoint"]

_MODULE_PREFIX = "module."


class ExportError(RuntimeError):
    """Nothing could be exported; the message says why and what to do."""


def plain_from_checkpoint(model_state: dict[str, object], trained_with: dict[str, str] | None
                          ) -> dict[str, object]:
    """The plain ``state_dict`` of a checkpoint's ``model_state``."""
    import torch

    if "flat" in model_state and set(model_state) == {"flat"}:
        from learner import ModelLayout, NetworkSpec
        from learner.network import PartialNetwork
        from p2p.runtime.assembly import plain_state_dict

        record = trained_with or {}
        if "network.layers" not in record:
            raise ExportError("the checkpoint does not record its network (an older version "
                              "wrote it); run the node once with this version, then export")
        network = NetworkSpec.parse(record["network.layers"],
                                    record.get("network.activation", "relu"))
        model = PartialNetwork(ModelLayout(network, []), seed=0)
        flat = model_state["flat"]
        assert isinstance(flat, torch.Tensor)
        with torch.no_grad():
            model.flat.copy_(flat)
        return dict(plain_state_dict(model))
    return {k.removeprefix(_MODULE_PREFIX): v for k, v in model_state.items()}


def export_model(data_dir: Path, out: Path, *, timeout: float = 10.0) -> str:
    """Write the node's model to ``out``; returns a one-line summary."""
    import torch

    from p2p.cli.admin_client import AdminClient, AdminClientError
    from p2p.runtime.admin_server import admin_socket_path
    from p2p.runtime.checkpoint import CheckpointStore, atomic_write_bytes

    fresh = ""
    socket = admin_socket_path(data_dir)
    if socket.exists():
        try:
            AdminClient(socket, timeout=timeout).request("checkpoint")
            fresh = " (checkpointed by the running node just now)"
        except AdminClientError:
            fresh = " (the node is not running: its last checkpoint)"
    state = CheckpointStore(data_dir).load()
    if state is None:
        raise ExportError(f"no checkpoint in {data_dir}; run the node there first (it writes "
                          "one every checkpoint.interval seconds and when it stops)")
    plain = plain_from_checkpoint(dict(state.model_state), state.trained_with)
    buffer = io.BytesIO()
    torch.save(plain, buffer)
    atomic_write_bytes(out, buffer.getvalue(), mode=0o644)
    values = sum(int(v.numel()) for v in plain.values() if isinstance(v, torch.Tensor))
    return (f"wrote {out}: {len(plain)} tensors, {values:,} values, round {state.round}"
            f"{fresh}")
