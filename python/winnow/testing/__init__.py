"""Test machinery, not the product: torch references of the ops' and the engines' semantics
and exact-data generators, for winnow's tests and examples (and an engine's own tests)."""
