"""Peer benchmarks (pgqueuer, Procrastinate), run with ``bench/.peers-venv``'s python as
``python -m bench.peers.<name> run --plan JSON``; each prints one JSON line of figures."""
