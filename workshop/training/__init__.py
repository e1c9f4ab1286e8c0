"""Training of the embedded forecaster (issue 5): data converters, the learner, and its report."""

from kernelcast.models.embedded.backend import LABEL_BOUND_LOG2

# Pairs beyond 8× either way are in an outer bin whatever their exact value; clipping keeps
# a few extreme labels (CUDA-L1 has S = 368) from dominating the squared error.
CLIP_LOG2 = LABEL_BOUND_LOG2
