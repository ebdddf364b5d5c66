"""The chaos suite: real workers and relays SIGKILLed, and a private Postgres crashed, under load.

Also a Django app (label ``chaos``) holding the side-effect ledger the suite's jobs write.
"""
