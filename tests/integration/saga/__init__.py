"""Saga acceptance tests (SPEC §7).

Every case runs twice: with `LocalExecutor` (tools and compensations in this process) and with
`CeleryExecutor` against the real Redis and one real worker process serving
`tests.integration.saga_tools` on pool `saga` (tests/integration/saga/conftest.py). The model is a
`ScriptedChatModel`; what it was sent is read back from `model.requests`. Every side effect of the
tools — balances, bookings, and the order in which compensations ran — is kept in the test Redis
under a fresh namespace per test, so the test reads what the worker did. Every service has
`compensate_on_tool_errors=True` and its own SQLite journal.
"""
