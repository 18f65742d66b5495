"""Running a model on benchmark cases: endpoint dialects, the per-case loop, resumable runs."""
