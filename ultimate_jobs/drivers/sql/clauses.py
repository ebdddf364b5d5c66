"""SQL text both dialects' catalogues compose verbatim (each statement still lives, whole, in its dialect's
catalogue; this is only the part the two write alike)."""

from __future__ import annotations

from ...contracts.series import WAIT_BINS

# The takeover rule of the leader lease upsert (x_job_scheduler_leases, primary key): the row is taken
# when it is already this holder's or expired; a live lease of another holder is left alone (the upsert
# answers no row). A renewal of a live lease keeps its acquired_at; a new term starts it at the new one.
LEASE_TAKEOVER = """ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder,
    acquired_at = CASE WHEN l.holder = excluded.holder AND l.expires_at > excluded.acquired_at
                       THEN l.acquired_at ELSE excluded.acquired_at END,
    expires_at = excluded.expires_at
WHERE l.holder = excluded.holder OR l.expires_at <= excluded.acquired_at"""

# x_job_counters' run-time bins (run_bin_<i>: bin i of WAIT_EDGES_MS) as a column list, and the sum of each
# over rows aliased ``c`` (a read or a fold).
RUN_BINS = ", ".join(f"run_bin_{i}" for i in range(WAIT_BINS))
RUN_BIN_SUMS = ", ".join(f"sum(c.run_bin_{i})" for i in range(WAIT_BINS))


def run_bins_added(stored: str) -> str:
    """The upsert's SET of every run-time bin: the excluded row's added into the stored one (``stored``: how
    the statement names the stored row, ``c.`` or nothing)."""
    return ", ".join(f"run_bin_{i} = {stored}run_bin_{i} + excluded.run_bin_{i}" for i in range(WAIT_BINS))
