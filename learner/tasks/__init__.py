"""Data tasks by name: built-in (digits, synthetic, mnist5k, mnist1d) and the user's files.

The registry (:mod:`.registry`) says how each task loads, its shape and its
public split; :mod:`.builtin` and :mod:`.files` hold the loaders, :mod:`.arrays`
what a loader returns and the checks every loader applies. The bundled data
lies in ``datasets/`` with its attribution. Nothing is downloaded.
"""

from learner.tasks.registry import (
    TASKS,
    Task,
    TaskData,
    TaskShape,
    digits_task,
    get_task,
    idx_task,
    load_task,
    mnist1d_task,
    mnist5k_task,
    npz_task,
    resolve_network,
    synthetic_task,
    task_shape,
)

__all__ = [
    "TASKS",
    "Task",
    "TaskData",
    "TaskShape",
    "digits_task",
    "get_task",
    "idx_task",
    "load_task",
    "mnist1d_task",
    "mnist5k_task",
    "npz_task",
    "resolve_network",
    "synthetic_task",
    "task_shape",
]
