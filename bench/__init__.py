"""Benchmarks for ultimate_jobs against pgqueuer and Procrastinate: ``make bench`` (``--quick`` for a
smoke run). Importing this package loads nothing: the peers import its modules from another virtualenv."""
