"""The live page of a run: a server that tails a run directory (`testbed run --web`, `testbed
watch`) and the page that draws what it folds, per cell, service, slice and scaler decision."""
