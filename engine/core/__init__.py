"""The step loop and what it drives: Engine (the thread that owns mx), scheduler, runner, sequences, sampling on the device."""
