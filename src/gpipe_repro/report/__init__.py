"""Sweep results -> tables and plots (generated, never edited by hand)."""
