"""Every worker of a pool serves the same tools: which pools differ, and which would if a worker joined."""

from __future__ import annotations

from workers import tool
from workers.runtime.catalog import (
    CatalogTool,
    MixedPool,
    WorkerEntry,
    mixed_pools,
    pool_conflicts,
    pool_tools,
)
from workers.tools.registry import ToolRegistry


class Files:
    @tool(pool="files")
    def read(self, path: str) -> str:
        return path

    @tool(pool="files")
    def write(self, path: str) -> str:
        return path

    @tool(pool="io")
    def fetch(self, url: str) -> str:
        return url


def catalog_tools(*names: str) -> list[CatalogTool]:
    registry = ToolRegistry([Files()])
    return [CatalogTool.of(d) for d in registry if d.name in names]


def entry(hostname: str, pools: list[str], *tools: str) -> WorkerEntry:
    return WorkerEntry(hostname, pools, "threads", 4, 1, 0.0, catalog_tools(*tools))


def test_pool_tools_are_the_sorted_tools_of_that_pool_only() -> None:
    assert pool_tools(catalog_tools("write", "read", "fetch"), "files") == ("read", "write")
    assert pool_tools(catalog_tools("write", "read", "fetch"), "io") == ("fetch",)


def test_workers_serving_the_same_tools_of_a_pool_are_not_mixed() -> None:
    # Given: two workers of `files` with the same files tools; one also serves `io`
    workers = [
        entry("a@h", ["files"], "read", "write"),
        entry("b@h", ["files", "io"], "read", "write", "fetch"),
    ]

    assert mixed_pools(workers) == []


def test_a_pool_whose_workers_differ_is_mixed_with_each_workers_tools() -> None:
    workers = [entry("a@h", ["files"], "read", "write"), entry("b@h", ["files"], "read")]

    assert mixed_pools(workers) == [MixedPool("files", {"a@h": ("read", "write"), "b@h": ("read",)})]


def test_a_joining_worker_conflicts_only_where_its_tools_differ_and_never_with_itself() -> None:
    live = [entry("a@h", ["files"], "read", "write"), entry("me@h", ["files"], "read")]

    same = pool_conflicts(live, "b@h", ["files"], catalog_tools("read", "write"))
    other = pool_conflicts(live, "me@h", ["files", "io"], catalog_tools("read", "fetch"))

    assert same == [MixedPool("files", {"b@h": ("read", "write"), "me@h": ("read",)})]
    assert other == [MixedPool("files", {"me@h": ("read",), "a@h": ("read", "write")})]
