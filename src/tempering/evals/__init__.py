"""Evaluation: statistics, contamination scan, results schema and the regression gate."""
