"""What a training rank does, whichever backend runs it: the RL step, micro-batches, the
loss's options, the process group and exported weight buckets."""
