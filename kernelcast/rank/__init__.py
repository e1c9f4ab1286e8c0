"""`kernelcast rank`: forecast many variants of one kernel, measure only what the forecasts cannot settle."""
