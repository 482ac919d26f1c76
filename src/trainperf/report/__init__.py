"""Presenting results: terminal tables and CSV (HTML reports come later)."""
