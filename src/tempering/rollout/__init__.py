"""Rollouts: the sampling engine and the trajectory store."""
