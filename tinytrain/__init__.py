"""tinytrain: compile a trained model into a static C program that trains on a microcontroller."""

__version__ = "0.1.0"
