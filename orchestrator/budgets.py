"""Budgets: how much one invocation, or one tenant in a day, may spend on tool calls, tokens, money and
time before it is stopped.

`AiService(budget=Budget(...))` bounds each invocation; `AiService(daily_budgets={"acme": Budget(...),
"*": Budget(...)})` bounds each tenant (the invocation parameter `tenant`, else `default`) per UTC day,
its counters kept in the executor's Redis so that every orchestrator of the fleet spends from the same
ones. Both are checked before each model call and before each batch of tool calls is dispatched; an
invocation that would go past one ends with `FinishReason.BUDGET_EXCEEDED`. A check that cannot be made
(Redis away, a model with no price) stops the invocation too: budgets fail closed.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import redis

from orchestrator.errors import OrchestratorError
from orchestrator.models.base import ChatResponse, TokenUsage
from workers.runtime.slots import RedisScript

__all__ = ["Budget", "InvocationSpend", "ModelPrice", "TenantBudgets", "cost_of"]

log = logging.getLogger(__name__)

ANY_TENANT = "*"
BUDGET_PREFIX = "toolfleet:budget:"
_KEEP_S = 2 * 86_400  # a day's counters outlive it, for whoever reads them late


@dataclass(frozen=True)
class ModelPrice:
    """What a model costs, per million input and output tokens (in whatever currency the budget's
    `max_cost` is)."""

    input_per_million: float
    output_per_million: float

    def cost(self, usage: TokenUsage) -> float:
        return (
            (usage.input_tokens or 0) * self.input_per_million
            + (usage.output_tokens or 0) * self.output_per_million
        ) / 1_000_000


@dataclass(frozen=True)
class Budget:
    """At most `max_tool_calls` tool calls, `max_tokens` tokens (input and output), `max_cost` spent on
    the model (priced by `prices`: a model's name, or the longest name its response's model starts
    with, or `"*"`), and `max_wall_s` seconds; None: no bound on that."""

    max_tool_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    max_wall_s: float | None = None
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("max_tool_calls", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise OrchestratorError(
                    f"Budget({name}=...) must be a whole number, 0 or more, got {value!r}"
                )
        for name in ("max_cost", "max_wall_s"):
            value = getattr(self, name)
            bad = isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            if value is not None and bad:
                raise OrchestratorError(f"Budget({name}=...) must be a number, 0 or more, got {value!r}")
        if self.max_cost is not None and not self.prices:
            raise OrchestratorError(
                "Budget(max_cost=...) needs prices={model: ModelPrice(...)}: what a model's tokens cost"
            )
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))

    def price_of(self, model_name: str | None) -> ModelPrice | None:
        """The price of `model_name`: its own, the longest name it starts with, else `"*"`'s."""
        if model_name:
            if model_name in self.prices:
                return self.prices[model_name]
            prefixes = [name for name in self.prices if name != "*" and model_name.startswith(name)]
            if prefixes:
                return self.prices[max(prefixes, key=len)]
        return self.prices.get("*")


def cost_of(budget: Budget, response: ChatResponse) -> float | None:
    """What `response` cost under `budget`'s prices; None when its model has no price."""
    price = budget.price_of(response.model_name)
    if price is None:
        return None
    return price.cost(response.token_usage or TokenUsage())


class InvocationSpend:
    """What one invocation spent so far, against its service's `Budget`."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.started = time.monotonic()
        self.tool_calls = 0
        self.tokens = 0
        self.cost = 0.0
        self.unpriced: str | None = None  # a model whose cost is unknown, once one answered

    def spent_on_model(self, response: ChatResponse) -> None:
        usage = response.token_usage or TokenUsage()
        self.tokens += usage.total_tokens or 0
        if self.budget.max_cost is not None:
            cost = cost_of(self.budget, response)
            if cost is None:
                self.unpriced = response.model_name or "unnamed"
            else:
                self.cost += cost

    def before_model(self) -> str | None:
        """Why the next model call must not be made; None when it may."""
        budget = self.budget
        if budget.max_tokens is not None and self.tokens >= budget.max_tokens:
            return f"its budget of {budget.max_tokens} tokens is spent ({self.tokens} used)"
        if budget.max_cost is not None:
            if self.unpriced is not None:
                return f"the cost of model '{self.unpriced}' is unknown: its budget has no price for it"
            if self.cost >= budget.max_cost:
                return f"its budget of {budget.max_cost:g} is spent ({self.cost:.4g} used)"
        return self._wall()

    def room_for_calls(self, count: int) -> tuple[int, str | None]:
        """How many of `count` calls may be dispatched now, and why the rest may not (nothing taken:
        the caller counts those it dispatches in `tool_calls`)."""
        wall = self._wall()
        if wall is not None:
            return 0, wall
        limit = self.budget.max_tool_calls
        if limit is None or self.tool_calls + count <= limit:
            return count, None
        return max(0, limit - self.tool_calls), f"its budget of {limit} tool calls is spent"

    def _wall(self) -> str | None:
        limit = self.budget.max_wall_s
        if limit is not None and time.monotonic() - self.started >= limit:
            return f"its budget of {limit:g} s is spent"
        return None


# KEYS: none. ARGV: key, field, wanted, limit, keep s. Adds to the field at most what keeps it within
# the limit; returns how much it added.
_TAKE = """
local used = tonumber(redis.call('HGET', ARGV[1], ARGV[2]) or '0')
local granted = math.max(0, math.min(tonumber(ARGV[3]), tonumber(ARGV[4]) - used))
if granted > 0 then
  redis.call('HINCRBY', ARGV[1], ARGV[2], granted)
end
redis.call('EXPIRE', ARGV[1], ARGV[5])
return granted
"""
_TAKE_SCRIPT = RedisScript(_TAKE)


class TenantBudgets:
    """Each tenant's budget per UTC day, its counters in Redis (`toolfleet:budget:<tenant>:<day>`):
    tool calls taken atomically (twenty invocations of one tenant at once never take more than its
    limit between them), tokens and cost added after each model call."""

    def __init__(self, budgets: Mapping[str, Budget], client: Any) -> None:
        for tenant, budget in budgets.items():
            if budget.max_wall_s is not None:
                raise OrchestratorError(
                    f"daily_budgets[{tenant!r}]: max_wall_s bounds one invocation, not a tenant's day"
                )
        self.budgets = MappingProxyType(dict(budgets))
        self.client = client

    def of(self, tenant: str) -> Budget | None:
        return self.budgets.get(tenant) or self.budgets.get(ANY_TENANT)

    def key(self, tenant: str, now: dt.datetime | None = None) -> str:
        day = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d")
        return f"{BUDGET_PREFIX}{tenant}:{day}"

    def spent(self, tenant: str) -> dict[str, str]:
        """What `tenant` spent today, as Redis holds it: `tool_calls`, `tokens`, `cost`, and `unpriced`
        (a model that answered with no price), those there are."""
        raw = self.client.hgetall(self.key(tenant))
        return {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()
        }

    def before_model(self, tenant: str) -> str | None:
        """Why `tenant` may not call the model now (its day's tokens or money spent, or Redis away)."""
        return self._spent_why(tenant, calls=False)

    def exhausted(self, tenant: str) -> str | None:
        """Why `tenant` may start no invocation today: any of its day's budgets spent (or Redis away)."""
        return self._spent_why(tenant, calls=True)

    def _spent_why(self, tenant: str, *, calls: bool) -> str | None:
        budget = self.of(tenant)
        if budget is None:
            return None
        whose = f"the daily budget of tenant '{tenant}'"
        try:
            spent = self.spent(tenant)
        except redis.RedisError as exc:
            return f"{whose} could not be checked ({exc})"
        if budget.max_tokens is not None and int(spent.get("tokens", 0)) >= budget.max_tokens:
            return f"{whose} of {budget.max_tokens} tokens is spent"
        if budget.max_cost is not None:
            if "unpriced" in spent:
                return f"{whose} cannot be counted: model '{spent['unpriced']}' has no price"
            if float(spent.get("cost", 0)) >= budget.max_cost:
                return f"{whose} of {budget.max_cost:g} is spent"
        limit = budget.max_tool_calls
        if calls and limit is not None and int(spent.get("tool_calls", 0)) >= limit:
            return f"{whose} of {limit} tool calls is spent"
        return None

    def before_calls(self, tenant: str, count: int) -> tuple[int, str | None]:
        """Take up to `count` of `tenant`'s tool calls for today: how many it got, and why not the rest."""
        budget = self.of(tenant)
        if budget is None or budget.max_tool_calls is None:
            return count, None
        try:
            granted = int(
                _TAKE_SCRIPT(
                    self.client, self.key(tenant), "tool_calls", count, budget.max_tool_calls, _KEEP_S
                )
            )
        except redis.RedisError as exc:
            return 0, f"the daily budget of tenant '{tenant}' could not be checked ({exc})"
        if granted < count:
            limit = budget.max_tool_calls
            return granted, f"the daily budget of tenant '{tenant}' of {limit} tool calls is spent"
        return granted, None

    def spent_on_model(self, tenant: str, response: ChatResponse) -> None:
        """Add a model call's tokens and cost to `tenant`'s day (lost if Redis is away: the next check,
        failing closed, stops the invocation)."""
        budget = self.of(tenant)
        if budget is None:
            return
        usage = response.token_usage or TokenUsage()
        cost = cost_of(budget, response) if budget.max_cost is not None else None
        key = self.key(tenant)
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(key, "tokens", usage.total_tokens or 0)
            if cost is not None:
                pipe.hincrbyfloat(key, "cost", cost)
            elif budget.max_cost is not None:  # the day's money is unknown from now on
                pipe.hset(key, "unpriced", response.model_name or "unnamed")
            pipe.expire(key, _KEEP_S)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not count a model call against tenant %s's daily budget: %s", tenant, exc)
