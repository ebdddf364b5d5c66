"""Shared pytest fixtures for the ultimate_jobs test suite (unit, postgres, redis, e2e)."""
