"""Factories and services built over ``job()``: backfills, exports, purge targets, the app's own retention
sweep, and the Prometheus collectors."""
