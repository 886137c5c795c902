"""Example tools used by the demo and the tests: math, weather, a bank and a travel agency."""
