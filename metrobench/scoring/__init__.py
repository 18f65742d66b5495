"""Scoring: Tier 1 and Tier 2 components, the judge, aggregation, and Parquet storage."""
