"""Which queue a call goes to: a build of its pool serving its tool at the version the model was given,
`no_worker` naming the versions present when none does, the pool's own queue for an undo or a pool of
workers that name no versions."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import redis

from orchestrator.executors.celery._pools import Pools
from orchestrator.executors.celery._versions import Routes
from workers import OutcomeKind, ToolOutcome, tool
from workers.runtime.catalog import CatalogTool, WorkerEntry
from workers.tools import ToolDefinition
from workers.tools.registry import ToolRegistry

POOL = "kv"


class Old:
    @tool("Looks up a key", pool=POOL, timeout=10)
    def lookup(self, key: str) -> str:
        return key


class New:
    @tool("Looks up a key, in a namespace", pool=POOL, timeout=20)
    def lookup(self, key: str, namespace: str = "main") -> str:
        return key


def definition(source: type) -> ToolDefinition:
    found = ToolRegistry([source()]).get("lookup")
    assert found is not None
    return found


def worker(hostname: str, source: type, *, build_id: str | None = None, concurrency: int = 4) -> WorkerEntry:
    tools = [CatalogTool.of(d, build_id) for d in ToolRegistry([source()])]
    return WorkerEntry(hostname, [POOL], "threads", concurrency, 1, 0.0, tools, build_id=build_id)


class FakeCatalog:
    """The live catalog: its workers, and the live workers of each pool or build queue."""

    def __init__(self, workers: Sequence[WorkerEntry], *, gone: Sequence[str] = ()) -> None:
        self.entries = list(workers)
        self.gone = set(gone)  # hostnames whose heartbeat expired since the entries were read
        self.failing = False

    def workers(self) -> list[WorkerEntry]:
        if self.failing:
            raise redis.ConnectionError("Redis is away")
        return self.entries

    def live_workers(self, queue: str) -> list[str]:
        if self.failing:
            raise redis.ConnectionError("Redis is away")
        return [
            e.hostname
            for e in self.entries
            if e.hostname not in self.gone and (queue in e.pools or queue in {e.queue(p) for p in e.pools})
        ]


def routes(*workers: WorkerEntry, build_id: str | None = None, gone: Sequence[str] = ()) -> Routes:
    return Routes(Pools(FakeCatalog(workers, gone=gone)), build_id, choose=lambda queues, weights: queues[0])  # type: ignore[arg-type]


def test_a_call_goes_to_the_queue_of_the_build_serving_its_version() -> None:
    # given: an old and a new build of the pool, serving different versions of `lookup`
    old, new = worker("old@h", Old), worker("new@h", New)
    routing = routes(old, new)
    # then: each definition's calls go to its own build's queue, never the pool's shared one
    assert routing.queue(definition(Old)) == old.queue(POOL)
    assert routing.queue(definition(New)) == new.queue(POOL)
    assert old.queue(POOL) != new.queue(POOL)


def test_a_version_no_live_worker_serves_is_no_worker_naming_the_versions_present() -> None:
    # given: two workers of the old build and one of the new, with a build id
    routing = routes(worker("a@h", Old), worker("b@h", Old), worker("c@h", New, build_id="rel-2"))
    wanted = dataclasses.replace(
        definition(Old), options=dataclasses.replace(definition(Old).options, timeout=30)
    )
    # when: a call wants a third version
    outcome = routing.queue(wanted)
    # then: answered at once, naming the versions the pool serves and how many workers serve each
    old, new = definition(Old).digest, f"{definition(New).digest}+rel-2"
    present = ", ".join(
        f"{v} ({n} worker{'s' if n > 1 else ''})" for v, n in sorted({old: 2, new: 1}.items())
    )
    assert isinstance(outcome, ToolOutcome)
    assert (outcome.kind, outcome.error_type) == (OutcomeKind.NO_WORKER, "NoWorkerError")
    assert outcome.text == (
        f"No live worker of pool '{POOL}' serves tool 'lookup' at version {wanted.digest}; "
        f"its live workers serve versions {present}"
    )


def test_a_pool_without_any_live_worker_keeps_its_own_text() -> None:
    outcome = routes().queue(definition(Old))
    assert isinstance(outcome, ToolOutcome)
    assert outcome.text == f"No live worker serves pool '{POOL}' of tool 'lookup'"


def test_a_version_naming_a_build_goes_to_that_build_only() -> None:
    # given: two builds serving the same digest of `lookup`
    one, two = worker("one@h", Old, build_id="rel-1"), worker("two@h", Old, build_id="rel-2")
    routing = routes(one, two)
    digest = definition(Old).digest
    # then: a definition naming a build reaches that build; one that names none, either
    assert routing.queue(dataclasses.replace(definition(Old), version=f"{digest}+rel-2")) == two.queue(POOL)
    assert routing.queue(dataclasses.replace(definition(Old), version=f"{digest}+rel-1")) == one.queue(POOL)
    assert routing.queue(definition(Old)) in {one.queue(POOL), two.queue(POOL)}
    missing = routing.queue(dataclasses.replace(definition(Old), version=f"{digest}+rel-3"))
    assert isinstance(missing, ToolOutcome) and missing.kind is OutcomeKind.NO_WORKER


def test_an_orchestrator_with_a_build_id_calls_only_workers_of_its_build_with_its_local_tools() -> None:
    one, two = worker("one@h", Old, build_id="rel-1"), worker("two@h", Old, build_id="rel-2")
    assert routes(one, two, build_id="rel-2").queue(definition(Old)) == two.queue(POOL)
    assert routes(one, two, build_id="rel-1").queue(definition(Old)) == one.queue(POOL)


def test_several_matching_builds_are_drawn_by_their_live_concurrency() -> None:
    # given: two builds of the same digest, 12 and 4 threads
    one, two = worker("one@h", Old, build_id="rel-1", concurrency=12), worker("two@h", Old, build_id="rel-2")
    drawn: list[tuple[list[str], list[float]]] = []

    def choose(queues: Sequence[str], weights: Sequence[float]) -> str:
        drawn.append((list(queues), list(weights)))
        return queues[-1]

    routing = Routes(Pools(FakeCatalog([one, two])), choose=choose)  # type: ignore[arg-type]
    # when: a call of that digest is routed
    queue = routing.queue(definition(Old))
    # then: both builds were candidates, weighted by their concurrency
    assert drawn == [([one.queue(POOL), two.queue(POOL)], [12, 4])]
    assert queue == two.queue(POOL)


def test_a_build_whose_workers_stopped_since_the_catalog_was_read_is_passed_over() -> None:
    # given: two builds of the digest, the first stopped since the entries were read
    one, two = worker("one@h", Old, build_id="rel-1"), worker("two@h", Old, build_id="rel-2")
    # then: the call goes to the one still beating
    assert routes(one, two, gone=["one@h"]).queue(definition(Old)) == two.queue(POOL)


def test_an_undo_without_a_build_of_its_version_goes_to_the_pools_own_queue() -> None:
    # given: only the new build lives
    routing = routes(worker("new@h", New))
    # then: an undo of an old call still runs on the pool (its undo matters more than its build)
    assert routing.queue(definition(Old), undoing=True) == POOL
    assert routing.undo_queue(definition(Old)) == POOL
    assert routing.undo_queue(definition(New)) == worker("new@h", New).queue(POOL)


def test_a_pool_with_a_worker_naming_no_versions_or_none_serving_the_tool_gets_the_pools_queue() -> None:
    new = worker("new@h", New)
    older = dataclasses.replace(
        worker("old@h", Old), tools=[dataclasses.replace(t, version=None) for t in worker("old@h", Old).tools]
    )
    # a worker of an earlier toolfleet consumes the pool's queue only: calls go there, as they did
    assert routes(new, older).queue(definition(Old)) == POOL
    # a pool whose live workers do not serve the tool at all: the call lands there and says so
    assert (
        routes(worker("other@h", New)).queue(
            dataclasses.replace(
                definition(Old),
                specification=dataclasses.replace(definition(Old).specification, name="stash"),
            )
        )
        == POOL
    )


def test_while_the_catalog_cannot_be_read_the_last_copy_routes() -> None:
    old, new = worker("old@h", Old), worker("new@h", New)
    catalog = FakeCatalog([old, new])
    pools = Pools(catalog)  # type: ignore[arg-type]
    routing = Routes(pools, choose=lambda queues, weights: queues[0])
    assert routing.queue(definition(New)) == new.queue(POOL)
    # when: Redis goes away
    catalog.failing = True
    pools._read_at = -1e9  # the copy is due again
    # then: the last copy still routes each version to its build
    assert routing.queue(definition(Old)) == old.queue(POOL)
    assert routing.pool_queues(POOL) == [POOL, *sorted([old.queue(POOL), new.queue(POOL)])]  # type: ignore[type-var]
