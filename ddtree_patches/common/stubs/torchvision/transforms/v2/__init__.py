"""Stub package: transformers imports transforms.v2.functional as a module."""
