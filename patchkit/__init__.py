"""patchkit: versioned patch sets for a pinned SGLang tree."""

__version__ = "0.1.0"

#: Version of the ``--json`` envelope; bump on incompatible key changes.
JSON_SCHEMA_VERSION = 1
