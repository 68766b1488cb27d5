"""7. Exports of a build: back to ONNX or TFLite with the trained weights, and the C library
(export-lib)."""
