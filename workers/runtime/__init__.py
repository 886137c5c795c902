"""The Celery side: the app's tasks, compensation, result backend, consumer, catalog, worker processes."""
