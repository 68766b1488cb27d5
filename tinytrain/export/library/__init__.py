"""`tinytrain export-lib`: a build's model C and the runtime kernels as a library for CMake,
Arduino, Zephyr and PlatformIO projects (sources.py reads the build, layouts.py arranges the
files for each ecosystem, export.py writes them atomically)."""
