"""Namespace of the exception classes tool tasks raise, one per tool exception type name.

They live in a real module so that Celery can pickle-check them and keeps their own names: Flower
then shows a failed call as, say, `InsufficientFunds('...')`.
"""
