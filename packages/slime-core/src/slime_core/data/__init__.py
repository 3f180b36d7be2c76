"""Prompt data: reading JSONL/Parquet, turning records into samples, and the data source."""
