"""The LLM loop behind `AiService`: a frozen configuration, a state per invocation, free functions.

- `config`: `LoopConfig`, what every invocation of one service shares, built once by the service;
- `state`: `InvocationState`, what one invocation knows and has done so far;
- `run`: `run_invocation`, the `while` loop: ask the model, run its tool calls, feed the results back;
- `calls`: one batch of tool calls, each through the saga, errors turned into messages;
- `toolset`: tool sources resolved, providers' tools, what the model sees, call ids;
- `catalog_tools`: the live worker catalog as the tools of a service given none.

Nothing here imports `orchestrator.service`.
"""

from orchestrator.loop.config import LoopConfig, Mode
from orchestrator.loop.run import RoundTripLimitError, run_invocation
from orchestrator.loop.state import InvocationState, new_state

__all__ = ["InvocationState", "LoopConfig", "Mode", "RoundTripLimitError", "new_state", "run_invocation"]
