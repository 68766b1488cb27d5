"""3. Graph to graph: autodiff, the update plan, int8 quantisation, the memory passes and the
planner; pipeline.py runs them in order (Options, compile_model)."""
