"""6. The device side: the toolchain and the build driver, QEMU twins, the runner over the serial
link, flashing, the training loop and its data, the Python API (online)."""
