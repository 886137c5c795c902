"""Running one call in this process: binding, coercion, results, retries, invocation data.

Nothing here imports Celery: `LocalExecutor` and the Celery tasks share these functions.
"""
