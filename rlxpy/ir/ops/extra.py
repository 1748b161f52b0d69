"""Secondary op families (conv, sequence, signal, custom, backward). Filled in separately."""
