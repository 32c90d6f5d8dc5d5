"""The machinery under the mathematics: numeric types and thread settings (`config`,
`threads`), memory (`allocator`, `chunking`), files (`files`: atomic writes; `tabular`:
delimited text) and resumable runs (`checkpointing`). Nothing here knows about Gaussian
processes."""
