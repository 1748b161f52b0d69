"""Composite and control-flow ops, expanded by ir/passes/unfuse.py. Filled in separately."""
