"""`python -m tempering.cli`: the same as the `temper` command."""

from tempering.cli import app

app()
