//! Loom models of fairq's atomic protocols live in `tests/`; run them with `run.sh`.
