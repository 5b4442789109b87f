"""Fails while being imported, as a module with a bug would."""

RATE = 1 / 0
