"""Stub: imported as a module (tvF) by transformers; no attribute is used at
import time."""
