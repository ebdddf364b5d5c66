"""Queue drivers: one protocol (:mod:`.base`), many backends (memory, postgres, redis)."""
