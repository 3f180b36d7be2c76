"""The checkpoint directory every backend writes and resumes from, and reading it safely."""
