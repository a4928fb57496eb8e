"""Engine knowledge: how each engine is started and wired for distributed serving."""
