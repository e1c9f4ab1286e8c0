"""The embedded forecaster: features read from code and facts, and the numpy model."""
