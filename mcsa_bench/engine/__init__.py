"""The numpy engine: the MCSA loop (loop.py), the table of run settings both backends read
(settings.py), the checkpoint file (checkpoint.py) and the interrupts Python swallowed (interrupts.py).

It knows nothing of Hydra or MLflow (docs/architecture.md, "Engine"); these are its public names.
"""

from mcsa_bench.engine.loop import (
    TRACE_DRAWS,
    CheckedModel,
    Cost,
    IterateTrace,
    LoopState,
    RunResult,
    Snapshot,
    Window,
    evaluation_rng,
    remove_checkpoint,
    run,
    write_loop_state,
)
from mcsa_bench.engine.settings import EVAL_SCHEDULES, EvaluationSchedule, Setting, Settings, setting, table

__all__ = ["TRACE_DRAWS", "CheckedModel", "Cost", "EVAL_SCHEDULES", "EvaluationSchedule", "IterateTrace", "LoopState",
           "RunResult", "Setting", "Settings", "Snapshot", "Window", "evaluation_rng", "remove_checkpoint", "run",
           "setting", "table", "write_loop_state"]
