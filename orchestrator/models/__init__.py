"""Chat models: the protocol and events, a scripted model, and real providers over httpx."""

from orchestrator.models.base import (
    ChatEvent,
    ChatModel,
    ChatRequest,
    ChatResponse,
    CompleteResponse,
    CompleteToolCall,
    FinishReason,
    PartialResponse,
    PartialToolCall,
    TokenUsage,
    ToolChoice,
)

__all__ = [
    "ChatEvent",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "CompleteResponse",
    "CompleteToolCall",
    "FinishReason",
    "PartialResponse",
    "PartialToolCall",
    "TokenUsage",
    "ToolChoice",
]
