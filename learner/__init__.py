"""learner package."""

# --- partial-model core (spec / layout / network) ---
from learner.layout import ModelLayout  # noqa: E402
from learner.network import PartialMLP, assign, extract  # noqa: E402
from learner.spec import NetworkSpec, PartialModelSpec, SpecError  # noqa: E402

__all__ = [*globals().get("__all__", []), "NetworkSpec", "PartialModelSpec", "SpecError",
           "ModelLayout", "PartialMLP", "extract", "assign"]

# --- data, training and the synchronous reference ---
from learner.data import DataSpec, NodeData, load_node_data  # noqa: E402
from learner.data_errors import DataError  # noqa: E402
from learner.idx import read_idx, write_idx  # noqa: E402
from learner.permutations import (  # noqa: E402
    format_permutation,
    last_classes_permutations,
    parse_permutation,
)
from learner.reference import (  # noqa: E402
    NodeSetup,
    ReferenceResult,
    ReferenceSetupError,
    average_shared_models,
    run_reference,
)
from learner.schemes import SEMI_LOCAL_SCHEMES, averaging_level, semi_local_scheme  # noqa: E402
from learner.tasks import TaskData, load_task  # noqa: E402
from learner.trainer import (  # noqa: E402
    Evaluation,
    TrainConfig,
    TrainConfigError,
    Trainer,
    evaluate_model,
)

__all__ = [*globals().get("__all__", []), "DataSpec", "NodeData", "load_node_data", "DataError",
           "read_idx", "write_idx", "format_permutation", "last_classes_permutations",
           "parse_permutation", "NodeSetup", "ReferenceResult", "ReferenceSetupError",
           "average_shared_models", "run_reference", "SEMI_LOCAL_SCHEMES", "averaging_level",
           "semi_local_scheme", "TaskData", "load_task", "Evaluation", "TrainConfig",
           "TrainConfigError", "Trainer", "evaluate_model"]
