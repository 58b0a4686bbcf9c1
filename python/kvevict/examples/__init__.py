"""Worked examples of the kvevict package (python -m kvevict.examples.<name>)."""
