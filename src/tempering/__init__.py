"""Tempering: post-training for open-weight language models."""

__version__ = "0.1.0"
