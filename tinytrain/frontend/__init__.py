"""1. Model files into the IR: the ONNX and TFLite importers, one handler per source op."""
