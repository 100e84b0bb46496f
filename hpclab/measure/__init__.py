"""Measurement core: honest timing and hardware facts (chapter 00)."""
