"""The machinery under the mathematics: numeric types and thread settings (`config`,
`threads`), memory (`allocator`, `chunking`), files (`files`: atomic writes; `tabular`:
delimited text; `shown_warnings`: a hook on the warnings a run shows) and resumable runs
(`checkpointing`). Nothing here knows about Gaussian
processes."""
