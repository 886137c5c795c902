"""The live catalog read past an entry that is not a worker's: one bad key never hides the others."""

from __future__ import annotations

import json
import logging
import time
import uuid

import pytest
import redis

from workers.protocol import WORKER_KEY, WORKERS_KEY
from workers.runtime.catalog import Catalog

pytestmark = pytest.mark.integration


def test_an_entry_that_is_not_a_workers_is_skipped_and_named(
    client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # given: a worker's entry, and three entries under the same keys that are not one
    suffix = uuid.uuid4().hex[:8]
    good = f"good-{suffix}@h"
    bad = {f"bad-{n}-{suffix}@h": raw for n, raw in enumerate(["{}", "not json", "[1, 2]"])}
    client.set(WORKER_KEY.format(good), json.dumps({"hostname": good, "pools": ["p"]}), ex=30)
    for name, raw in bad.items():
        client.set(WORKER_KEY.format(name), raw, ex=30)
    client.zadd(WORKERS_KEY, dict.fromkeys([good, *bad], time.time() + 30))  # as heartbeats index them
    try:
        # when
        with caplog.at_level(logging.WARNING, logger="workers.runtime.catalog"):
            hostnames = [entry.hostname for entry in Catalog(client).workers()]
    finally:
        client.delete(WORKER_KEY.format(good), *(WORKER_KEY.format(name) for name in bad))
        client.zrem(WORKERS_KEY, good, *bad)
    # then: the worker is listed, and each bad entry is named in a warning, not raised
    assert good in hostnames and not set(bad) & set(hostnames)
    for name in bad:
        assert any(name in record.getMessage() for record in caplog.records), name
