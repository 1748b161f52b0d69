"""Reference semantics: filled in separately."""
