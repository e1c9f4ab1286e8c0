"""kernelcast: performance forecasts for GPU kernels inside the editor."""

__version__ = "0.1.0"
