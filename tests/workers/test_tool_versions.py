"""A tool's version: a stable digest of its specification and options, `+<build id>` on a worker of a build;
the catalog carries it, a worker's build of a pool has a queue of its own, and workers serving different
versions of the same tools are a rolling pool, not a mixed one."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers import tool
from workers.errors import SettingsError
from workers.runtime.builds import RollingPool, build_queues, rolling_pools
from workers.runtime.catalog import CatalogTool, WorkerEntry, mixed_pools, newest_first, pool_conflicts
from workers.settings import Settings
from workers.tools import ToolDefinition
from workers.tools.registry import ToolRegistry
from workers.tools.versions import (
    build_queue,
    check_build_id,
    tool_digest,
    tool_version,
    version_build,
    version_digest,
    version_matches,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


class Lookup:
    @tool("Looks up a key", pool="kv", timeout=10)
    def lookup(self, key: str) -> str:
        return key

    @tool("Stores a value", pool="kv")
    def store(self, key: str, value: str) -> str:
        return value


class LookupWithNamespace:
    @tool("Looks up a key", pool="kv", timeout=10)
    def lookup(self, key: str, namespace: str = "main") -> str:
        return key


def definition(source: object = Lookup, name: str = "lookup") -> ToolDefinition:
    found = ToolRegistry([source() if isinstance(source, type) else source]).get(name)
    assert found is not None
    return found


def with_options(base: ToolDefinition, **changes: object) -> ToolDefinition:
    return dataclasses.replace(base, options=dataclasses.replace(base.options, **changes))


def test_the_digest_is_twelve_hex_digits_and_the_same_for_the_same_definition() -> None:
    # given: the same tool discovered twice
    first, second = definition(), definition()
    # then: one digest, 12 lowercase hex digits
    assert first.digest == second.digest == tool_digest(first)
    assert len(first.digest) == 12 and int(first.digest, 16) >= 0 and first.digest == first.digest.lower()


def test_the_digest_is_the_same_in_another_process_whatever_its_hash_seed() -> None:
    # given: the digest computed here, and in two other interpreters with different hash seeds
    code = (
        "from tests.workers.test_tool_versions import definition; "
        "print(definition().digest, definition(name='store').digest)"
    )
    here = f"{definition().digest} {definition(name='store').digest}"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60
        )
        # then: the same digests
        assert out.stdout.strip() == here


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(lambda d: definition(LookupWithNamespace), id="a parameter added"),
        pytest.param(
            lambda d: dataclasses.replace(
                d, specification=dataclasses.replace(d.specification, description="Finds a key")
            ),
            id="the description",
        ),
        pytest.param(lambda d: with_options(d, timeout=20), id="timeout"),
        pytest.param(lambda d: with_options(d, retries=2), id="retries"),
        pytest.param(lambda d: with_options(d, idempotent=True), id="idempotent"),
        pytest.param(lambda d: with_options(d, pool="kv2"), id="pool"),
        pytest.param(lambda d: with_options(d, retry_on=(TimeoutError,)), id="retry_on"),
        pytest.param(lambda d: with_options(d, requires_approval=True), id="approval"),
        pytest.param(lambda d: with_options(d, concurrency=3), id="concurrency"),
    ],
)
def test_the_digest_changes_with_the_schema_and_the_options(changed: object) -> None:
    base = definition()
    other = changed(base)  # type: ignore[operator]
    assert other.digest != base.digest


def test_a_definition_that_differs_only_in_its_function_has_the_same_digest() -> None:
    # given: the same specification and options, another callable (the code changed, the contract not)
    base = definition()
    other = dataclasses.replace(base, function=lambda key: key.upper())
    # then: the same digest; only a build id tells such builds apart
    assert other.digest == base.digest
    assert tool_version(other, "rel-2") != tool_version(base, "rel-1")


def test_a_build_id_is_appended_and_read_back() -> None:
    base = definition()
    assert tool_version(base) == base.digest
    assert tool_version(base, "rel-2") == f"{base.digest}+rel-2"
    assert (version_digest(f"{base.digest}+rel-2"), version_build(f"{base.digest}+rel-2")) == (
        base.digest,
        "rel-2",
    )
    assert version_build(base.digest) is None


def test_a_version_without_build_matches_every_build_of_its_digest_and_one_with_a_build_that_build_only() -> (
    None
):
    assert version_matches("abc", "abc")
    assert version_matches("abc", "abc+rel-1")
    assert version_matches("abc", "abc+rel-2")
    assert not version_matches("abd", "abc+rel-1")
    assert version_matches("abc+rel-1", "abc+rel-1")
    assert not version_matches("abc+rel-1", "abc+rel-2")
    assert not version_matches("abc+rel-1", "abc")


@pytest.mark.parametrize("bad", ["", "a b", "x" * 65, "rel/2", "é"])
def test_a_build_id_is_letters_digits_dots_dashes_and_underscores(bad: str) -> None:
    assert check_build_id("v1.2_rc-3") == "v1.2_rc-3"
    with pytest.raises(ValueError, match="--build-id must be 1 to 64"):
        check_build_id(bad)
    with pytest.raises(SettingsError, match="TOOLFLEET_BUILD_ID must be 1 to 64"):
        Settings.from_env({"TOOLFLEET_BUILD_ID": bad} if bad else {"TOOLFLEET_BUILD_ID": " "})


def test_the_build_id_setting_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).build_id is None
    assert Settings.from_env({"TOOLFLEET_BUILD_ID": "rel-2"}).build_id == "rel-2"


def test_a_build_queue_names_its_pool_and_depends_on_the_versions_only() -> None:
    assert build_queue("kv", [("a", "1"), ("b", "2")]) == build_queue("kv", [("b", "2"), ("a", "1")])
    assert build_queue("kv", [("a", "1")]).startswith("kv@")
    assert build_queue("kv", [("a", "1")]) != build_queue("kv", [("a", "2")])
    assert build_queue("kv", [("a", "1")]) != build_queue("kv2", [("a", "1")])


def test_the_catalog_carries_each_tools_version_and_a_catalog_definition_its_digest() -> None:
    # given: a tool as a worker of build rel-2 advertises it
    advertised = CatalogTool.of(definition(), "rel-2")
    # when: it travels as JSON
    back = CatalogTool.from_json(json.loads(json.dumps(advertised.to_json())))
    # then: the version arrives, and a definition made from it routes by the digest (any build)
    assert back.version == f"{definition().digest}+rel-2"
    assert back.definition().version == definition().digest
    # and: an entry of a worker naming no versions reads as such
    unversioned = {**advertised.to_json(), "version": None}
    assert CatalogTool.from_json(unversioned).version is None
    assert CatalogTool.from_json(unversioned).definition().version is None


def entry(
    hostname: str, source: object, *, build_id: str | None = None, started_at: float = 0.0
) -> WorkerEntry:
    tools = [CatalogTool.of(d, build_id) for d in ToolRegistry([source])]
    return WorkerEntry(hostname, ["kv"], "threads", 4, 1, started_at, tools, build_id=build_id)


def test_a_workers_queue_of_a_pool_is_that_of_its_build() -> None:
    # given: two workers of one build, one of another, one naming no versions
    one, same = entry("a@h", Lookup()), entry("b@h", Lookup())
    other = entry("c@h", Lookup(), build_id="rel-2")
    older = dataclasses.replace(one, tools=[dataclasses.replace(t, version=None) for t in one.tools])
    # then: a build shares its queue, as the worker computes it from its registry
    assert one.queue("kv") == same.queue("kv") != other.queue("kv")
    assert build_queues(ToolRegistry([Lookup()]), ["kv", "io"], None) == {"kv": one.queue("kv")}
    assert build_queues(ToolRegistry([Lookup()]), ["kv"], "rel-2") == {"kv": other.queue("kv")}
    assert one.queue("io") is None
    assert older.queue("kv") is None


def test_workers_serving_the_same_tools_at_other_versions_are_rolling_not_mixed() -> None:
    # given: an old and a new build of pool kv, `lookup` changed, `store` not
    old = entry("old@h", Lookup(), started_at=1.0)
    new = dataclasses.replace(
        entry("new@h", Lookup(), started_at=2.0),
        tools=[
            CatalogTool.of(definition(LookupWithNamespace)),
            *(t for t in entry("x@h", Lookup()).tools if t.specification.name == "store"),
        ],
    )
    # then: not a mixed pool, and the new worker may join
    assert mixed_pools([old, new]) == []
    assert pool_conflicts([old], "new@h", ["kv"], new.tools) == []
    # and: a rolling pool, naming the versions of the tool that differs, newest first
    assert rolling_pools([old, new]) == [
        RollingPool(
            "kv",
            {
                "lookup": {
                    definition(LookupWithNamespace).digest: ("new@h",),
                    definition().digest: ("old@h",),
                }
            },
        )
    ]
    assert rolling_pools([old, entry("same@h", Lookup())]) == []
    assert [e.hostname for e in newest_first([old, new])] == ["new@h", "old@h"]
