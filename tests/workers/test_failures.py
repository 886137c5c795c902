"""A failed call's exception, named after the tool's: Celery reads it back as that class in any
process, and a name the failures module already holds for itself falls back to `ToolFailure`."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from celery import Celery
from celery.backends.base import BaseBackend

import workers._failures as failures
from workers._failures import ToolFailure, failure_for
from workers.protocol import OutcomeKind, ToolOutcome, outcome_from_failure


def _backend() -> BaseBackend:
    return BaseBackend(app=Celery(set_as_current=False), serializer="json")


def _stored(exc: BaseException) -> Any:
    """The failure as Celery's JSON result backend stores it."""
    return json.loads(json.dumps(_backend().prepare_exception(exc, "json")))


@pytest.mark.parametrize(
    "error_type", ["Any", "ToolOutcome", "cast", "failure_for", "FAILURE_MODULE", "__class__"]
)
def test_a_tool_exception_named_like_a_name_of_the_module_reads_back_as_a_tool_failure(
    error_type: str,
) -> None:
    # given a tool that raised an exception named like one of the failures module's own names
    outcome = ToolOutcome(kind=OutcomeKind.EXECUTION_ERROR, text="refused", error_type=error_type)
    stored = _stored(failure_for(outcome, "w1"))

    # when Celery reads the stored failure back
    exc = _backend().exception_to_python(stored)

    # then it is a ToolFailure, and the outcome keeps the tool's own type name
    assert type(exc) is ToolFailure and str(exc) == "refused"
    read = outcome_from_failure(stored)
    assert read is not None and read.error_type == error_type


def test_a_failure_class_is_not_written_into_the_modules_namespace() -> None:
    cls = failure_for(
        ToolOutcome(kind=OutcomeKind.EXECUTION_ERROR, text="x", error_type="NeverSeenBefore")
    ).__class__
    assert "NeverSeenBefore" not in vars(failures)
    assert failures.NeverSeenBefore is cls  # found by name all the same
    assert pickle.loads(pickle.dumps(cls)) is cls


def test_a_failure_raised_in_one_process_reads_back_in_another_by_its_name() -> None:
    # given a failure named after a tool's exception, pickled (a prefork child) and stored as JSON
    outcome = ToolOutcome(kind=OutcomeKind.EXECUTION_ERROR, text="no money", error_type="InsufficientFunds")
    exc = failure_for(outcome, "w1")
    pickled, stored = pickle.dumps(exc), json.dumps(_stored(exc))

    # when a fresh process, which never created that class, reads both
    script = textwrap.dedent(
        """
        import json, pickle, sys
        from celery import Celery
        from celery.backends.base import BaseBackend
        pickled, stored = bytes.fromhex(sys.argv[1]), sys.argv[2]
        backend = BaseBackend(app=Celery(set_as_current=False), serializer="json")
        for exc in (pickle.loads(pickled), backend.exception_to_python(json.loads(stored))):
            print(type(exc).__module__, type(exc).__name__, type(exc).__mro__[1].__name__, exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, pickled.hex(), stored],
        capture_output=True,
        timeout=60,
        check=True,
    )

    # then both are that class, a ToolFailure of the failures module
    expected = "workers._failures InsufficientFunds ToolFailure no money"
    assert result.stdout.decode().splitlines() == [expected, expected]
