"""slime.backends: the train-backend helpers slime's user code imports."""
