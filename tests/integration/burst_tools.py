"""The tool of the `burst` pool: served by a many-threaded worker on RabbitMQ, called in bursts."""

from __future__ import annotations

from workers import tool


@tool("Echoes its text", pool="burst", timeout=10)
def echo_burst(text: str) -> str:
    return text
