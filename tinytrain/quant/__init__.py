"""int8 arithmetic shared by the importers, the op definitions and the C kernels.

`fixedpoint` mirrors TFLite's reference integer arithmetic (gemmlowp rounding) exactly, so the
numpy op references and the generated C are bit-exact with the LiteRT reference kernels.
"""
