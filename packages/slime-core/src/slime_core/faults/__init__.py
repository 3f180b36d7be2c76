"""The errors that end a run with a message that says it all, and what a run does with non-finite values."""
