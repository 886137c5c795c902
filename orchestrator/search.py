"""Tool search: the model first sees a search tool and finds the tools it needs by asking."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from workers.calls.binding import parse_arguments
from workers.errors import ToolArgumentsError
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ToolSpecification

__all__ = [
    "FOUND_TOOLS_ATTRIBUTE",
    "EmbeddingModel",
    "HashingEmbeddingModel",
    "SimpleToolSearchStrategy",
    "ToolSearchResult",
    "ToolSearchStrategy",
    "VectorToolSearchStrategy",
]

FOUND_TOOLS_ATTRIBUTE = "found_tools"


@dataclass(frozen=True)
class ToolSearchResult:
    """Names of the tools found, and the text the model reads."""

    found: list[str]
    text: str


class ToolSearchStrategy(Protocol):
    """Describes the search tool to the model and answers its searches.

    `candidates` are the tools the model cannot see yet (neither `ALWAYS_VISIBLE` nor found before).
    `search` raises `ToolArgumentsError` when the model's arguments are unusable: the model reads
    the message as the search tool's (failed) result and may search again.
    """

    def search_tool(self) -> ToolSpecification: ...

    def search(
        self, request: ToolExecutionRequest, candidates: Sequence[ToolSpecification]
    ) -> ToolSearchResult: ...


def _argument(request: ToolExecutionRequest, name: str) -> object:
    """The search tool's one argument; missing, `null` or unparsable arguments are an arguments error."""
    value = parse_arguments(request.arguments, request.name).get(name)
    if value is None:
        raise ToolArgumentsError(f'Required parameter "{name}" of tool "{request.name}" is missing')
    return value


def _json_type(value: object) -> str:
    return {type(None): "null", str: "string", dict: "object", list: "array", bool: "boolean"}.get(
        type(value), "number"
    )


def _search_terms(request: ToolExecutionRequest, name: str) -> list[str]:
    """The model's terms: lower-cased, split on any whitespace, each once, in the order given."""
    raw = _argument(request, name)
    if not isinstance(raw, list) or not all(isinstance(term, str) for term in raw):
        shown = _json_type(raw) if not isinstance(raw, list) else "an array holding a non-string"
        raise ToolArgumentsError(
            f'Argument "{name}" of tool "{request.name}" must be an array of strings, got {shown}'
        )
    return list(dict.fromkeys(word for term in raw for word in term.lower().split()))


def _found_text(names: Sequence[str]) -> str:
    return f"Tools found: {', '.join(names)}" if names else "No matching tools found"


class SimpleToolSearchStrategy:
    """Scores tools by the terms the model gives: +2 when a tool's name contains a term, +1 when its
    description does; tools scoring at least 1, best first, at most `max_results`.

    Terms are lower-cased, split on any whitespace and counted once each. `terms` missing or not
    an array of strings is an arguments error.
    """

    NAME = "tool_search_tool"

    def __init__(self, *, max_results: int = 5) -> None:
        self.max_results = max_results

    def search_tool(self) -> ToolSpecification:
        return ToolSpecification(
            name=self.NAME,
            description="Finds tools that can help with the task. Give search terms; matching tools become "
            "available to call.",
            parameters={
                "type": "object",
                "properties": {
                    "terms": {"type": "array", "items": {"type": "string"}, "description": "search terms"}
                },
                "required": ["terms"],
            },
        )

    def search(
        self, request: ToolExecutionRequest, candidates: Sequence[ToolSpecification]
    ) -> ToolSearchResult:
        terms = _search_terms(request, "terms")
        scored: list[tuple[int, int, str]] = []
        for position, spec in enumerate(candidates):
            name, description = spec.name.lower(), (spec.description or "").lower()
            score = sum((2 if term in name else 0) + (1 if term in description else 0) for term in terms)
            if score >= 1:
                scored.append((-score, position, spec.name))
        names = [name for _, _, name in sorted(scored)[: self.max_results]]
        return ToolSearchResult(names, _found_text(names))


class EmbeddingModel(Protocol):
    """Turns texts into vectors."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashingEmbeddingModel:
    """An offline embedding: hashed word and character-trigram counts, L2-normalised.

    Needs no download and is deterministic; plug in a real embedding model for better recall.
    """

    def __init__(self, dimensions: int = 512) -> None:
        self.dimensions = dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed(text) for text in texts]

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        words = re.findall(r"[a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower())
        features = words + [w[i : i + 3] for w in words for i in range(max(len(w) - 2, 1))]
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "little") % self.dimensions
            vector[index] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]


class VectorToolSearchStrategy:
    """Ranks tools by cosine similarity between the model's `query` and each tool's `"name: description"`."""

    NAME = "tool_search_tool"

    def __init__(
        self, embedding_model: EmbeddingModel | None = None, *, max_results: int = 5, min_score: float = 0.1
    ) -> None:
        self.embedding_model = embedding_model or HashingEmbeddingModel()
        self.max_results = max_results
        self.min_score = min_score
        self._cache: dict[str, list[float]] = {}

    def search_tool(self) -> ToolSpecification:
        return ToolSpecification(
            name=self.NAME,
            description="Finds tools that can help with the task. Describe what you need; matching tools "
            "become available to call.",
            parameters={
                "type": "object",
                "properties": {"query": {"type": "string", "description": "what the tool should do"}},
                "required": ["query"],
            },
        )

    def search(
        self, request: ToolExecutionRequest, candidates: Sequence[ToolSpecification]
    ) -> ToolSearchResult:
        query = _argument(request, "query")
        if not isinstance(query, str):
            raise ToolArgumentsError(
                f'Argument "query" of tool "{request.name}" must be a string, got {_json_type(query)}'
            )
        if not query.strip() or not candidates:
            return ToolSearchResult([], _found_text([]))
        texts = [f"{spec.name}: {spec.description or ''}" for spec in candidates]
        missing = [t for t in texts if t not in self._cache]
        if missing:
            self._cache.update(zip(missing, self.embedding_model.embed(missing), strict=True))
        query_vector = self.embedding_model.embed([query])[0]
        scored = sorted(
            (
                (-_cosine(query_vector, self._cache[text]), i, spec.name)
                for i, (spec, text) in enumerate(zip(candidates, texts, strict=True))
            ),
        )
        names = [name for score, _, name in scored if -score >= self.min_score][: self.max_results]
        return ToolSearchResult(names, _found_text(names))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
