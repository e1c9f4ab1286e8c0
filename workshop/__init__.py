"""The workshop: corpus generator, measuring runner, datasets and training. Not installed."""
