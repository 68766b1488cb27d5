"""4. The IR and its memory plan into a C project (Jinja templates), program.json beside it, and
output directories written atomically."""
