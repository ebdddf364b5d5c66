"""Models for the tenancy attack suite (tests/security): scoped buckets and items, an unscoped note."""
