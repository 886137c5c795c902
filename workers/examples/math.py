"""The calculator of the documentation's first example."""

from __future__ import annotations

import math

from workers import tool


class Calculator:
    """Arithmetic tools; `square_root` is the documentation's example."""

    @tool("Adds two numbers", pool="heavy", timeout=10)
    def add(self, a: int, b: int) -> float:
        return float(a + b)

    @tool(name="squareRoot", pool="heavy", timeout=10)
    def square_root(self, x: float) -> float:
        """Returns a square root of a given number."""
        if x < 0:
            raise ValueError(f"cannot take the square root of a negative number: {x}")
        return math.sqrt(x)


calculator = Calculator()
