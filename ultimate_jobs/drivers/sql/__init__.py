"""The core both SQL backends share: one driver, the operator's store and the other stores written once over a
:class:`~.dialect.Dialect` — the backend's statement catalogue and its codecs for ids, instants and JSON.
``drivers/postgres`` and ``drivers/sqlite`` each hold a dialect, its catalogue (``queries/``) and the few
operations whose algorithm differs (Postgres decides in one statement; SQLite in a ``BEGIN IMMEDIATE``
transaction of several)."""
