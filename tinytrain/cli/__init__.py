"""9. The command line (`tinytrain ...`, main.py) and its help texts."""
