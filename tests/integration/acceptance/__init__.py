"""Acceptance tests of `AiService` (SPEC §4-§6).

Every case runs twice: with `LocalExecutor` (tools in this process) and with `CeleryExecutor` against
the real Redis and one real worker process serving `tests.integration.acceptance_tools` on pool `acc`
(tests/integration/acceptance/conftest.py). The model is a `ScriptedChatModel`; what it was sent is
read back from `model.requests`.
"""
