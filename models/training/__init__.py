"""Training of the embedded forecaster (issue 5): data converters, the learner, and its report."""
