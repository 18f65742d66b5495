"""The paper layer: tables and figures from the Parquet scores and statistics, and the report."""
