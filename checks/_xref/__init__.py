"""Resolution model for the xref gate."""
