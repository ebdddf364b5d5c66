"""Template tags of the ultimate_jobs admin pages."""
