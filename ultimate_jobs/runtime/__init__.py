"""The machinery every long-running role shares: the two-phase drain (``lifecycle``), the one polling loop
(``polling``), Django connection hygiene on role threads (``dbconn``) and the counters a worker moves
(``counters``)."""
