"""The Redis driver (``pip install ultimate_jobs[redis]``): ``ULTIMATE_JOBS["DRIVER"] = "redis"``.

>>> from ultimate_jobs.drivers.redis import RedisDriver
>>> set_job_driver(RedisDriver.from_url("redis://127.0.0.1:6379/0"))
"""

from __future__ import annotations

from .driver import DONE_TTL_MS, RedisDriver

__all__ = ["DONE_TTL_MS", "RedisDriver"]
