"""Preparing a GPU host: offline bundles and arranged test models."""
