"""Benchmarks: real `scheduler run` processes against a fresh PostgreSQL database each.

One script per scenario (`python -m bench.a_every_second`, …), `python -m bench.run_all`
for all of them; see BENCHMARKS.md.
"""
