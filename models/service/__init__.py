"""The forecaster service: HTTP API, backend registry, calibration, LLM backends."""
