"""Readers of kernel source text: pure functions of text, no IO, no compiler."""
